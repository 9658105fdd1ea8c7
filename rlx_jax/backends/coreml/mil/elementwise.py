"""Elementwise MIL rules: Constant, Activation, Binary, Compare, Where, Cast, Iota.

MIL's log/rsqrt add an epsilon by default; rules pass epsilon=0 so results match JAX. The special
functions (erf_inv, lgamma, digamma) are composed in mil/special.py, through UNARY_FNS.
"""
import numpy as np

from ....ir.ops import OpKind as K
from .legality import I32, MIL_DTYPES, mil_dtype_name, mil_np_dtype
from .table import UNARY_FNS, check_const_size, mil_rule, refuse


# unary fn -> MIL op of the same meaning (float operands unless the MIL op also takes int32)
DIRECT_UNARY = {
    "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil", "exp": "exp",
    "exp2": "exp2", "sqrt": "sqrt", "square": "square", "erf": "erf", "tanh": "tanh",
    "sigmoid": "sigmoid", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
    "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "atanh": "atanh",
    "silu": "silu",
}
UNSUPPORTED_UNARY = {"population_count": "MIL has no bit-counting op"}


@mil_rule(K.Constant)
def _constant(ctx, node):
    v = np.asarray(node.attrs["value"])
    return ctx.const(v.astype(mil_np_dtype(v.dtype)))


@mil_rule(K.Iota)
def _iota(ctx, node):
    a = node.attrs
    shape = a["shape"]
    check_const_size(shape, mil_np_dtype(a["dtype"]), "Iota")
    line = np.arange(shape[a["dimension"]])
    bshape = [1] * len(shape)
    bshape[a["dimension"]] = shape[a["dimension"]]
    val = np.broadcast_to(line.reshape(bshape), shape).astype(mil_np_dtype(a["dtype"]))
    return ctx.const(val)


def log1p(ctx, x):
    """log1p without cancellation: log(u) * x / (u - 1), u = 1 + x (exact where u == 1)."""
    mb = ctx.mb
    one = ctx.like(1, x)
    u = mb.add(x=x, y=one)
    um1 = mb.sub(x=u, y=one)
    log_u = mb.log(x=u, epsilon=ctx.like(0, u))
    ratio = mb.mul(x=log_u, y=mb.real_div(x=x, y=um1))      # x / (u - 1) ~ 1: no underflow
    ratio = mb.select(cond=mb.equal(x=u, y=ctx.like(np.inf, u)), a=log_u, b=ratio)  # inf/inf
    return mb.select(cond=mb.equal(x=u, y=one), a=x, b=ratio)


def _expm1(ctx, x):
    """expm1 without cancellation: (u - 1) * x / log(u), u = exp(x); u itself where it
    overflows (the ratio would be inf / inf)."""
    mb = ctx.mb
    one = ctx.like(1, x)
    u = mb.exp(x=x)
    um1 = mb.sub(x=u, y=one)
    ratio = mb.mul(x=um1, y=mb.real_div(x=x, y=mb.log(x=u, epsilon=ctx.like(0, u))))
    ratio = mb.select(cond=mb.equal(x=u, y=ctx.like(np.inf, u)), a=u, b=ratio)
    small = mb.select(cond=mb.equal(x=u, y=one), a=x, b=ratio)
    return mb.select(cond=mb.equal(x=um1, y=ctx.like(-1, x)), a=um1, b=small)


def _trunc(ctx, x):
    mb = ctx.mb
    return mb.mul(x=mb.sign(x=x), y=mb.floor(x=mb.abs(x=x)))


def _round(ctx, node, x):
    """rounding 1: ties to even; 0: ties away from zero. MIL's round promises the nearest
    integer, not where an exact half goes (only 0.5 -> 0), so a half (x - floor(x) == 0.5) is
    placed here: away from zero x + sign(x) / 2, to even 2 * round(x / 2) (x / 2 is no half)."""
    mb = ctx.mb
    r = mb.round(x=x)
    tie = mb.equal(x=mb.sub(x=x, y=mb.floor(x=x)), y=ctx.like(0.5, x))
    if node.attrs.get("rounding", 0) == 1:
        half = mb.mul(x=mb.round(x=mb.mul(x=x, y=ctx.like(0.5, x))), y=ctx.like(2, x))
    else:
        half = mb.add(x=x, y=mb.mul(x=mb.sign(x=x), y=ctx.like(0.5, x)))
    return mb.select(cond=tie, a=half, b=r)


def jax_sign(ctx, x):
    """sign keeping a zero's own sign (JAX: sign(-0.0) is -0.0) and NaN (MIL's sign gives -1, 0
    or 1 only): x itself unless |x| > 0."""
    mb = ctx.mb
    return mb.select(cond=mb.greater(x=mb.abs(x=x), y=ctx.like(0, x)), a=mb.sign(x=x), b=x)


def _large(ctx, x):
    """|x| beyond which x*x may overflow but log(2|x|) is asinh/acosh to working precision."""
    return ctx.like(64.0 if ctx.np_dtype(x) == np.float16 else 4096.0, x)


def _log_2x(ctx, ax):
    return ctx.mb.add(x=ctx.mb.log(x=ax, epsilon=ctx.like(0, ax)), y=ctx.like(np.log(2.0), ax))


def _asinh(ctx, x):
    """sign(x) * log1p(|x| + x^2 / (1 + sqrt(x^2 + 1))), and log(2|x|) for large |x| (x^2
    overflows; inf / inf would be NaN)."""
    mb = ctx.mb
    ax = mb.abs(x=x)
    one = ctx.like(1, x)
    big = mb.greater(x=ax, y=_large(ctx, x))
    small = mb.select(cond=big, a=one, b=ax)
    x2 = mb.mul(x=small, y=small)
    inner = mb.add(x=small, y=mb.real_div(x=x2, y=mb.add(x=one, y=mb.sqrt(
        x=mb.add(x=x2, y=one)))))
    mag = mb.select(cond=big, a=_log_2x(ctx, ax), b=log1p(ctx, inner))
    return mb.mul(x=jax_sign(ctx, x), y=mag)


def _acosh(ctx, x):
    """log(x + sqrt(x - 1) * sqrt(x + 1)) (NaN below 1, no x^2 overflow), log(2x) for
    large x."""
    mb = ctx.mb
    one = ctx.like(1, x)
    root = mb.mul(x=mb.sqrt(x=mb.sub(x=x, y=one)), y=mb.sqrt(x=mb.add(x=x, y=one)))
    near = mb.log(x=mb.add(x=x, y=root), epsilon=ctx.like(0, x))
    return mb.select(cond=mb.greater(x=x, y=_large(ctx, x)), a=_log_2x(ctx, x), b=near)


def _integer_pow(ctx, node, x, y):
    """x**y by repeated squaring (as XLA does); negative y: 1 / x**|y|."""
    mb = ctx.mb
    n, acc, base = abs(y), None, x
    while n:
        if n & 1:
            acc = base if acc is None else mb.mul(x=acc, y=base)
        n >>= 1
        if n:
            base = mb.mul(x=base, y=base)
    if acc is None:
        acc = ctx.const(np.ones(node.out.shape, ctx.np_dtype(x)))
    if y < 0:
        acc = mb.real_div(x=ctx.like(1, x), y=acc)
    return acc


def _gelu_tanh(ctx, x):
    """x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), jax.nn.gelu's own formula in the
    operand's precision: MIL's gelu(TANH_APPROXIMATION) rounds differently, so where tanh
    saturates it gives a tiny negative value where JAX gives 0 (and a log of it NaN, not -inf)."""
    mb = ctx.mb
    inner = mb.add(x=x, y=mb.mul(x=ctx.like(0.044715, x), y=mb.mul(x=x, y=mb.mul(x=x, y=x))))
    t = mb.tanh(x=mb.mul(x=ctx.like(np.sqrt(2 / np.pi), x), y=inner))
    return mb.mul(x=x, y=mb.mul(x=ctx.like(0.5, x), y=mb.add(x=ctx.like(1, x), y=t)))


COMPOSED_UNARY = {
    "neg": lambda ctx, n, x: ctx.mb.mul(x=x, y=ctx.like(-1, x)),
    "log": lambda ctx, n, x: ctx.mb.log(x=x, epsilon=ctx.like(0, x)),
    # 1 / sqrt(x), not MIL's rsqrt, which is 1 / sqrt(x + epsilon): -0 + 0 is +0, so
    # rsqrt(-0.0) would be +inf where JAX gives -inf
    "rsqrt": lambda ctx, n, x: ctx.mb.real_div(x=ctx.like(1, x), y=ctx.mb.sqrt(x=x)),
    "log1p": lambda ctx, n, x: log1p(ctx, x),
    "expm1": lambda ctx, n, x: _expm1(ctx, x),
    "round": _round,
    # x <= 0 ? 0 : x, not MIL's relu, whose NaN the spec leaves open (JAX: relu(NaN) is NaN)
    "relu": lambda ctx, n, x: ctx.mb.select(cond=ctx.mb.less_equal(x=x, y=ctx.like(0, x)),
                                            a=ctx.like(0, x), b=x),
    "is_finite": lambda ctx, n, x: ctx.mb.less_equal(
        x=ctx.mb.abs(x=x), y=ctx.like(np.finfo(ctx.np_dtype(x)).max, x)),
    "cbrt": lambda ctx, n, x: ctx.mb.mul(x=jax_sign(ctx, x), y=ctx.mb.pow(
        x=ctx.mb.abs(x=x), y=ctx.like(1.0 / 3.0, x))),
    "asinh": lambda ctx, n, x: _asinh(ctx, x),
    "acosh": lambda ctx, n, x: _acosh(ctx, x),
    "gelu": lambda ctx, n, x: ctx.mb.gelu(x=x, mode="EXACT"),
    "gelu_tanh": lambda ctx, n, x: _gelu_tanh(ctx, x),
    "integer_pow": lambda ctx, n, x: _integer_pow(ctx, n, x, n.attrs["y"]),
}
INT_OK = {"abs", "sign", "square", "neg", "integer_pow", "not"}


@mil_rule(K.Activation)
def _activation(ctx, node, x):
    fn, dt = node.attrs["fn"], node.inputs[0].dtype
    if fn in UNSUPPORTED_UNARY:
        refuse(node, UNSUPPORTED_UNARY[fn])
    if fn == "not":
        if dt == np.bool_:
            return ctx.mb.logical_not(x=x)
        return ctx.mb.sub(x=ctx.mb.mul(x=x, y=ctx.scalar(-1, dt)), y=ctx.scalar(1, dt))
    if dt.kind != "f" and fn not in INT_OK:
        refuse(node, f"MIL's {fn} takes floating-point operands only, not {dt.name}",
               "cast to float32 first, or use backend='xla'")
    if fn == "sign" and dt.kind == "f":
        return jax_sign(ctx, x)
    if fn in DIRECT_UNARY:
        return getattr(ctx.mb, DIRECT_UNARY[fn])(x=x)
    if fn in COMPOSED_UNARY:
        return COMPOSED_UNARY[fn](ctx, node, x)
    if fn in UNARY_FNS:
        return UNARY_FNS[fn](ctx, node, x)
    refuse(node, f"no MIL rule for unary fn {fn!r}")


def _by_zero(ctx, y, value, r):
    """JAX's integer x / 0 (-1) and x % 0 (x): MIL leaves division by zero undefined."""
    mb = ctx.mb
    return mb.select(cond=mb.equal(x=y, y=ctx.scalar(0, np.int32)), a=value, b=r)


def _int_div(ctx, x, y):
    """Integer division rounding toward zero (JAX), from MIL's flooring floor_div; whether
    mod(x, y) is 0 does not depend on mod's sign convention, which MIL does not give."""
    mb = ctx.mb
    q = mb.floor_div(x=x, y=y)
    inexact = mb.not_equal(x=mb.mod(x=x, y=y), y=ctx.scalar(0, np.int32))
    signs_differ = mb.not_equal(x=mb.sign(x=x), y=mb.sign(x=y))
    fix = mb.logical_and(x=inexact, y=signs_differ)
    return _by_zero(ctx, y, ctx.scalar(-1, np.int32), mb.add(x=q, y=mb.cast(x=fix,
                                                                              dtype="int32")))


def _rem(ctx, x, y):
    """C fmod semantics (sign of the dividend): sign(x) * mod(|x|, |y|), a mod of operands of
    one sign (MIL does not say whose sign its mod takes)."""
    mb = ctx.mb
    r = mb.mul(x=mb.sign(x=x), y=mb.mod(x=mb.abs(x=x), y=mb.abs(x=y)))
    return _by_zero(ctx, y, x, r) if ctx.np_dtype(x).kind == "i" else r


def _nan_free_const(v):
    """Whether IR value `v` is a constant without NaN."""
    if v.node is None or v.node.kind is not K.Constant:
        return False
    c = np.asarray(v.node.attrs["value"])
    return c.dtype.kind != "f" or not np.isnan(c).any()


def _max_min(ctx, node, x, y, op):
    """JAX's max / min: NaN if either operand is NaN. MIL's maximum / minimum promise nothing
    for a NaN (Metal's fmax drops it), so each operand that may be NaN is selected where it is."""
    mb = ctx.mb
    r = getattr(mb, op)(x=x, y=y)
    if node.inputs[0].dtype.kind != "f":
        return r
    for v, var in ((node.inputs[1], y), (node.inputs[0], x)):
        if not _nan_free_const(v):
            r = mb.select(cond=mb.not_equal(x=var, y=var), a=var, b=r)
    return r


def _pow(ctx, x, y):
    """pow with IEEE 754's exact cases, which MIL does not promise: pow(x, 0) = 1 (NaN x too),
    pow(1, y) = 1 (NaN y too), pow(-1, +-inf) = 1."""
    mb = ctx.mb
    one = ctx.like(1, x)
    exact = mb.logical_or(x=mb.equal(x=y, y=ctx.like(0, y)), y=mb.equal(x=x, y=one))
    exact = mb.logical_or(x=exact, y=mb.logical_and(
        x=mb.equal(x=x, y=ctx.like(-1, x)),
        y=mb.equal(x=mb.abs(x=y), y=ctx.like(np.inf, y))))
    return mb.select(cond=exact, a=one, b=mb.pow(x=x, y=y))


def _negative(ctx, v):
    """v < 0, counting -0.0 as negative (1/v is -inf there)."""
    mb = ctx.mb
    zero = ctx.like(0, v)
    return mb.logical_or(x=mb.less(x=v, y=zero),
                         y=mb.less(x=mb.real_div(x=ctx.like(1, v), y=v), y=zero))


def _atan2(ctx, y, x):
    """atan(y/x) moved to the right quadrant; signed zeros as in C atan2. Two infinities
    count as +-1 (inf / inf would be NaN; C gives +-pi/4 and +-3pi/4)."""
    mb = ctx.mb
    inf = ctx.like(np.inf, x)
    both_inf = mb.logical_and(x=mb.equal(x=mb.abs(x=x), y=inf), y=mb.equal(x=mb.abs(x=y), y=inf))
    ratio = mb.select(cond=both_inf, a=mb.mul(x=mb.sign(x=y), y=mb.sign(x=x)),
                      b=mb.real_div(x=y, y=x))
    base = mb.atan(x=ratio)
    both_zero = mb.logical_and(x=mb.equal(x=x, y=ctx.like(0, x)),
                               y=mb.equal(x=y, y=ctx.like(0, y)))
    base = mb.select(cond=both_zero, a=y, b=base)
    neg = mb.cast(x=_negative(ctx, y), dtype=mil_dtype_name(ctx.np_dtype(y)))
    turn = mb.sub(x=ctx.like(np.pi, y), y=mb.mul(x=neg, y=ctx.like(2 * np.pi, y)))
    return mb.select(cond=_negative(ctx, x), a=mb.add(x=base, y=turn), b=base)


DIRECT_BINARY = {"add": "add", "sub": "sub", "mul": "mul"}
MAX_MIN = {"max": "maximum", "min": "minimum"}
LOGICAL = {"and": "logical_and", "or": "logical_or", "xor": "logical_xor"}


@mil_rule(K.Binary)
def _binary(ctx, node, x, y):
    fn, dt = node.attrs["fn"], node.inputs[0].dtype
    mb = ctx.mb
    if fn in LOGICAL:
        if dt != np.bool_:
            refuse(node, f"MIL has no bitwise {fn} on {dt.name} (only logical, on bool)")
        return getattr(mb, LOGICAL[fn])(x=x, y=y)
    if dt == np.bool_:
        refuse(node, f"arithmetic {fn} on bool", "cast to int32 first")
    if fn in DIRECT_BINARY:
        return getattr(mb, DIRECT_BINARY[fn])(x=x, y=y)
    if fn in MAX_MIN:
        return _max_min(ctx, node, x, y, MAX_MIN[fn])
    if fn == "div":
        return mb.real_div(x=x, y=y) if dt.kind == "f" else _int_div(ctx, x, y)
    if fn == "rem":
        return _rem(ctx, x, y)
    if fn == "pow" and dt.kind == "f":
        return _pow(ctx, x, y)
    if fn == "atan2" and dt.kind == "f":
        return _atan2(ctx, x, y)
    refuse(node, f"no MIL op for {fn} on {dt.name}")


COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
           "gt": "greater", "ge": "greater_equal"}


@mil_rule(K.Compare)
def _compare(ctx, node, x, y):
    if node.inputs[0].dtype == np.bool_:
        x, y = ctx.mb.cast(x=x, dtype="int32"), ctx.mb.cast(x=y, dtype="int32")
    return getattr(ctx.mb, COMPARE[node.attrs["fn"]])(x=x, y=y)


@mil_rule(K.Where)
def _where(ctx, node, p, x, y):
    return ctx.mb.select(cond=p, a=x, b=y)


def _float_to_int(ctx, x, dst):
    """XLA's float -> integer conversion: NaN -> 0, truncation toward zero, saturation at the
    range of `dst` (the IR dtype; inside MIL every integer is int32). MIL's cast is undefined
    out of range, so the value is clamped in float32 first; int32's maximum is no float32, so
    values at or above 2**31 are selected to it after the cast."""
    mb = ctx.mb
    if ctx.np_dtype(x) != np.float32:        # float16 cannot hold int32's bounds
        x = mb.cast(x=x, dtype="fp32")
    info = np.iinfo(dst)
    lo, hi = max(int(info.min), I32.min), min(int(info.max), I32.max)
    x = mb.select(cond=mb.not_equal(x=x, y=x), a=ctx.like(0, x), b=_trunc(ctx, x))
    hi_f = np.float32(hi) if int(np.float32(hi)) <= hi else np.nextafter(np.float32(hi), 0)
    y = mb.cast(x=mb.minimum(x=mb.maximum(x=x, y=ctx.like(lo, x)), y=ctx.like(hi_f, x)),
                dtype="int32")
    if int(hi_f) < hi:
        y = mb.select(cond=mb.greater_equal(x=x, y=ctx.like(hi + 1, x)),
                      a=ctx.scalar(hi, np.int32), b=y)
    return y


@mil_rule(K.Cast)
def _cast(ctx, node, x):
    """Narrow integer dtypes (int8/16, uint8/16) are int32 inside MIL; legality admits them only
    where their values are proven in range, so integer -> integer casts are identities."""
    src, ir_dst = mil_np_dtype(node.inputs[0].dtype), np.dtype(node.attrs["dtype"])
    dst = mil_np_dtype(ir_dst)
    if dst not in MIL_DTYPES:
        refuse(node, f"cast to {ir_dst.name}: Core ML has no such tensor type")
    if src == dst:
        return x
    if dst == np.bool_:
        return ctx.mb.not_equal(x=x, y=ctx.scalar(0, src))
    if src == np.bool_:
        return ctx.mb.cast(x=x, dtype=mil_dtype_name(dst))
    if src.kind == "f" and dst.kind == "i":
        return _float_to_int(ctx, x, ir_dst)
    return ctx.mb.cast(x=x, dtype=mil_dtype_name(dst))
