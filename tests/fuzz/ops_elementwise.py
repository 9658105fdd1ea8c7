"""Elementwise generators: unary, binary with broadcasting and weak-typed scalars, comparisons,
where, casts. Each returns (template, args, exact) or raises Reject (see generate.py)."""
import numpy as np

from .generate import Reject
from .program import FLOATS
from .registry import op

INTS = ("int32",)
NUMERIC = ("float32", "float16", "int32")

# name: (template, family, keeps exactness)
FLOAT_UNARY = {
    "neg": ("-{0}", "unary", True), "abs": ("jnp.abs({0})", "unary", True),
    "square": ("jnp.square({0})", "unary", False), "relu": ("jax.nn.relu({0})", "unary", True),
    "clip": ("jnp.clip({0}, -1.5, 2.0)", "unary", True),
    "sin": ("jnp.sin({0})", "transcendental", False),
    "cos": ("jnp.cos({0})", "transcendental", False),
    "tanh": ("jnp.tanh({0})", "transcendental", False),
    "exp": ("jnp.exp({0})", "transcendental", False),
    "log": ("jnp.log({0})", "transcendental", False),
    "sqrt": ("jnp.sqrt({0})", "transcendental", False),
    "rsqrt": ("lax.rsqrt({0})", "transcendental", False),
    "log1p": ("jnp.log1p({0})", "transcendental", False),
    "expm1": ("jnp.expm1({0})", "transcendental", False),
    "sigmoid": ("jax.nn.sigmoid({0})", "transcendental", False),
    "erf": ("lax.erf({0})", "transcendental", False),
    "arctan": ("jnp.arctan({0})", "transcendental", False),
    "gelu": ("jax.nn.gelu({0})", "transcendental", False),
}
# discrete float unary ops: (template, nearest decision boundary of x)
FLOAT_STEP = {
    "floor": ("jnp.floor({0})", np.round), "ceil": ("jnp.ceil({0})", np.round),
    "round": ("jnp.round({0})", lambda x: np.floor(x) + 0.5),
    "sign": ("jnp.sign({0})", np.zeros_like),
}
INT_UNARY = {"ineg": "-{0}", "iabs": "jnp.abs({0})", "isquare": "jnp.square({0})",
             "isign": "jnp.sign({0})", "ipow": "lax.integer_pow({0}, 3)"}


def _unary(template, exact):
    def gen(ctx):
        a = ctx.operand(FLOATS)
        return template, [a], exact and ctx.v(a).exact
    return gen


def _step(template, boundary):
    def gen(ctx):
        a = ctx.operand(FLOATS)
        ctx.far_from(a, boundary)
        return template, [a], True
    return gen


def _int_unary(template):
    def gen(ctx):
        return template, [ctx.operand(INTS)], True
    return gen


for _name, (_t, _fam, _exact) in FLOAT_UNARY.items():
    op(_name, _fam, 1.0)(_unary(_t, _exact))


@op("reciprocal", "unary", 1.0)
def _reciprocal(ctx):
    """1 / x; an inexact x is kept away from 0, where the sign of a computed zero (which
    backends may round differently, e.g. in a dot product) decides between +inf and -inf."""
    a = ctx.operand(FLOATS)
    ctx.far_from(a, np.zeros_like)
    return "1.0 / {0}", [a], False
for _name, (_t, _b) in FLOAT_STEP.items():
    op(_name, "unary", 0.6)(_step(_t, _b))
for _name, _t in INT_UNARY.items():
    op(_name, "unary", 0.4)(_int_unary(_t))
op("not", "unary", 0.5)(lambda ctx: ("~{0}", [ctx.operand(("bool",))], True))


def broadcast_partner(ctx, shape):
    """A shape that broadcasts with `shape`: equal, some dims set to 1, leading dims dropped,
    or new leading dims added."""
    shape = list(shape)
    u = ctx.r.random()
    if u < 0.3:
        return tuple(shape)
    if u < 0.6:
        return tuple(1 if ctx.r.random() < 0.4 else d for d in shape)
    if u < 0.8:
        return tuple(shape[int(ctx.r.integers(0, len(shape) + 1)):])
    lead = min(int(ctx.r.integers(1, 3)), ctx.config.max_rank - len(shape))
    return tuple(ctx.shape(max(lead, 0))) + tuple(shape)


def partner(ctx, a, dtypes, kind="normal"):
    """A second operand for `a`: an existing value or a new input of a broadcast-compatible
    shape, dtype from `dtypes` (usually a's)."""
    va = ctx.v(a)

    def fits(v):
        try:
            np.broadcast_shapes(v.shape, va.shape)
            return v.dtype in dtypes and len(np.broadcast_shapes(v.shape, va.shape)) <= 5
        except ValueError:
            return False
    b = ctx.pick(fits, fresh=0.5)
    if b is None:
        b = ctx.new_input(broadcast_partner(ctx, va.shape), ctx.dtype(dtypes), kind)
    return b


def _same_or_mixed(ctx, dtype, family):
    if ctx.r.random() < 0.8:
        return (dtype,)
    return family


FLOAT_SCALARS = ("2.5", "0.5", "-1.0", "3", "1e-3")
INT_SCALARS = ("2", "-3", "1")


def _binary(template, dtypes, scalar_ok=True, nonzero_divisor=False, exact_only=False,
            exact=False, divisor_off_zero=False):
    def gen(ctx):
        a = ctx.operand(dtypes)
        da = ctx.v(a).dtype
        if exact_only and not ctx.v(a).exact:
            raise Reject("inexact operand")
        if scalar_ok and ctx.r.random() < 0.2:
            s = ctx.choice(FLOAT_SCALARS if da in FLOATS else INT_SCALARS)
            t = template.format("{0}", s) if ctx.r.random() < 0.5 else template.format(s, "{0}")
            if nonzero_divisor and "{0}" in t.split("//")[-1].split("%")[-1]:
                _nonzero(ctx, a)
            if divisor_off_zero and "{0}" in t.split("/")[-1]:
                ctx.far_from(a, np.zeros_like)     # see _reciprocal
            return t, [a], exact and ctx.v(a).exact
        b = partner(ctx, a, _same_or_mixed(ctx, da, dtypes))
        if exact_only and not ctx.v(b).exact:
            raise Reject("inexact operand")
        if nonzero_divisor:
            _nonzero(ctx, b)
        if divisor_off_zero:
            ctx.far_from(b, np.zeros_like)
        return template, [a, b], exact and ctx.v(a).exact and ctx.v(b).exact
    return gen


def _nonzero(ctx, name):
    def check(data):
        if np.any(data[name] == 0):
            raise Reject("zero divisor")
    ctx.check(check)


_BINARY = [  # name, template, dtypes, options, weight
    ("add", "{0} + {1}", NUMERIC + ("bool",), {}, 2.0),
    ("sub", "{0} - {1}", NUMERIC, {}, 2.0),
    ("mul", "{0} * {1}", NUMERIC, {}, 2.0),
    ("div", "{0} / {1}", FLOATS, {"divisor_off_zero": True}, 1.0),
    ("maximum", "jnp.maximum({0}, {1})", NUMERIC, {"exact": True}, 1.0),
    ("minimum", "jnp.minimum({0}, {1})", NUMERIC, {"exact": True}, 1.0),
    ("pow", "jnp.power({0}, {1})", FLOATS, {}, 0.5),
    ("atan2", "jnp.arctan2({0}, {1})", FLOATS, {"scalar_ok": False}, 0.5),
    ("floordiv", "{0} // {1}", INTS, {"nonzero_divisor": True, "exact": True}, 0.7),
    ("rem", "{0} % {1}", INTS, {"nonzero_divisor": True, "exact": True}, 0.7),
    ("ffloordiv", "{0} // {1}", FLOATS,
     {"nonzero_divisor": True, "exact_only": True, "scalar_ok": False}, 0.3),
    ("bitand", "{0} & {1}", INTS + ("bool",), {"scalar_ok": False, "exact": True}, 0.4),
    ("bitor", "{0} | {1}", INTS + ("bool",), {"scalar_ok": False, "exact": True}, 0.4),
    ("bitxor", "{0} ^ {1}", INTS + ("bool",), {"scalar_ok": False, "exact": True}, 0.4),
]
for _name, _t, _d, _o, _w in _BINARY:
    fam = "transcendental" if _name in ("pow", "atan2") else "binary"
    op(_name, fam, _w)(_binary(_t, _d, **{**{"exact": _d == INTS}, **_o}))


def _compare(template):
    def gen(ctx):
        a = ctx.operand(NUMERIC + ("bool",))
        b = partner(ctx, a, _same_or_mixed(ctx, ctx.v(a).dtype, NUMERIC))
        va, vb = ctx.v(a), ctx.v(b)
        if a != b and not (va.exact and vb.exact) and (va.dtype in FLOATS or vb.dtype in FLOATS):
            m = max(ctx.margin(a), ctx.margin(b))

            def check(data):
                x, y = np.broadcast_arrays(data[a].astype(np.float64), data[b].astype(np.float64))
                fin = np.isfinite(x) & np.isfinite(y)
                scale = np.maximum(1.0, np.maximum(np.abs(x), np.abs(y)))
                if np.any((np.abs(x - y) <= m * scale)[fin]):
                    raise Reject("comparison near equality")
            ctx.check(check)
        return template, [a, b], True
    return gen


for _name, _t in [("lt", "{0} < {1}"), ("le", "{0} <= {1}"), ("gt", "{0} > {1}"),
                  ("ge", "{0} >= {1}"), ("eq", "{0} == {1}"), ("ne", "{0} != {1}")]:
    op(_name, "compare", 0.6)(_compare(_t))


@op("where", "compare", 2.0)
def _where(ctx):
    c = ctx.operand(("bool",))
    x = partner(ctx, c, NUMERIC)
    if ctx.r.random() < 0.3:
        s = "0.0" if ctx.v(x).dtype in FLOATS else "0"
        return f"jnp.where({{0}}, {{1}}, {s})", [c, x], ctx.v(x).exact
    y = partner(ctx, x, (ctx.v(x).dtype,))
    return "jnp.where({0}, {1}, {2})", [c, x, y], ctx.v(x).exact and ctx.v(y).exact


CAST_TO = {"float32": "jnp.float32", "float16": "jnp.float16", "int32": "jnp.int32",
           "bool": "jnp.bool_"}


@op("astype", "cast", 3.0)
def _astype(ctx):
    if ctx.r.random() < 0.15:        # float -> int of NaN and infinities
        a, dst = ctx.new_input(ctx.shape(), ctx.dtype(FLOATS), "special"), "int32"
    else:
        a, dst = ctx.operand(), ctx.dtype()
    src = ctx.v(a).dtype
    if src == dst:
        raise Reject("same dtype")
    if src in FLOATS and dst == "int32":
        # XLA converts NaN to 0 and saturates infinities; finite values are far below 2**31
        # (the generator's magnitude bound), so only truncation needs a margin
        ctx.far_from(a, np.round)     # truncation jumps at the integers
    if src in FLOATS and dst == "bool":
        ctx.far_from(a, np.zeros_like)
    form = "{0}.astype(%s)" if ctx.r.random() < 0.7 else "lax.convert_element_type({0}, %s)"
    return form % CAST_TO[dst], [a], ctx.v(a).exact
