"""Elementwise primitives: unary math, binary arithmetic and bitwise, comparisons, selects, casts,
and `mulhi` (the high half of an integer product, decomposed exactly into int32 arithmetic)."""
import jax.numpy as jnp
import numpy as np

from ...ir.ops import OpKind as K
from . import jaxpr_rule

UNARY = {
    "neg": "neg", "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil",
    "is_finite": "is_finite", "exp": "exp", "exp2": "exp2", "log": "log", "log1p": "log1p",
    "expm1": "expm1", "tanh": "tanh", "logistic": "sigmoid", "sin": "sin", "cos": "cos",
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
    "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "cbrt": "cbrt", "square": "square", "erf": "erf", "erfc": "erfc",
    "erf_inv": "erf_inv", "lgamma": "lgamma", "digamma": "digamma", "not": "not",
    "population_count": "population_count",
}
BINARY = {
    "add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "div": "div", "rem": "rem",
    "pow": "pow", "max": "max", "min": "min", "atan2": "atan2", "nextafter": "nextafter",
    "and": "and", "or": "or", "xor": "xor", "shift_left": "shift_left",
    "shift_right_logical": "shift_right_logical",
    "shift_right_arithmetic": "shift_right_arithmetic",
}
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def _unary(fn):
    return lambda ctx, x, **params: ctx.emit(K.Activation, (x,), fn=fn)


def _binary(fn):
    def rule(ctx, x, y, **params):
        (shape, dtype), = ctx.out_avals
        x, y = ctx.b.cast(x, dtype), ctx.b.cast(y, dtype)   # mul[out_dtype] and friends
        return ctx.emit(K.Binary, (x, y), fn=fn)
    return rule


for _p, _fn in UNARY.items():
    jaxpr_rule(_p)(_unary(_fn))
for _p, _fn in BINARY.items():
    jaxpr_rule(_p)(_binary(_fn))
for _p in COMPARE:
    jaxpr_rule(_p)(lambda ctx, x, y, _fn=_p, **params: ctx.emit(K.Compare, (x, y), fn=_fn))

jaxpr_rule("integer_pow")(
    lambda ctx, x, *, y: ctx.emit(K.Activation, (x,), fn="integer_pow", y=int(y)))
jaxpr_rule("round")(lambda ctx, x, *, rounding_method: ctx.emit(
    K.Activation, (x,), fn="round", rounding=int(rounding_method)))
jaxpr_rule("convert_element_type")(
    lambda ctx, x, *, new_dtype, **params: ctx.b.cast(x, new_dtype))
jaxpr_rule("bitcast_convert_type")(
    lambda ctx, x, *, new_dtype: ctx.emit(K.Bitcast, (x,), dtype=np.dtype(new_dtype)))
jaxpr_rule("reduce_precision")(lambda ctx, x, *, exponent_bits, mantissa_bits: ctx.emit(
    K.ReducePrecision, (x,), exponent_bits=int(exponent_bits), mantissa_bits=int(mantissa_bits)))
# identities: no node at all (one device: a sharding constraint or a reshard moves nothing)
jaxpr_rule("copy", "stop_gradient", "optimization_barrier", "device_put",
           "sharding_constraint", "reshard")(lambda ctx, *xs, **params: list(xs))
# lax.dce_sink marks a value as used for JAX's dead-code elimination: no outputs, nothing to do
jaxpr_rule("dce_sink")(lambda ctx, *xs, **params: [])


@jaxpr_rule("select_n")
def _select_n(ctx, pred, *cases):
    """select_n(p, c0, c1, ...) picks c[p]; two cases -> one Where, more -> a Where chain."""
    b = ctx.b
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == np.bool_:
        return ctx.emit(K.Where, (pred, cases[1], cases[0]))
    out = cases[0]
    for i, c in enumerate(cases[1:], start=1):
        hit = b.compare("eq", pred, b.scalar(i, pred))
        out = b.where(hit, c, out)
    return out


@jaxpr_rule("clamp")
def _clamp(ctx, lo, x, hi):
    b = ctx.b
    return b.binary("min", b.binary("max", x, lo), hi)


_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}


def _total_order_key(b, x):
    """A signed-integer key of float `x` ordered as IEEE totalOrder:
    -NaN < -inf < ... < -0.0 < +0.0 < ... < inf < NaN (sort comparators and searchsorted)."""
    it = np.dtype(_SIGNED[x.dtype.itemsize])
    i = b.add(K.Bitcast, (x,), {"dtype": it}, out=[(x.shape, it)])
    sign = b.binary("shift_right_arithmetic", i, b.scalar(8 * it.itemsize - 1, i))  # 0 or -1
    return b.binary("xor", i, b.binary("and", sign, b.scalar(np.iinfo(it).max, i)))


def _total_order(fn):
    def rule(ctx, x, y, **params):
        if jnp.issubdtype(x.dtype, jnp.floating):   # bfloat16 included
            x, y = _total_order_key(ctx.b, x), _total_order_key(ctx.b, y)
        return ctx.emit(K.Compare, (x, y), fn=fn)
    return rule


for _p, _fn in (("eq_to", "eq"), ("lt_to", "lt"), ("le_to", "le")):
    jaxpr_rule(_p)(_total_order(_fn))


def _floor_divmod(b, x, n, signed=True):
    """(floor(x / n), x mod n in [0, n)) for a positive constant n, from truncating div / rem
    (the same for unsigned x, or x that is never negative: `signed=False`)."""
    c = b.scalar(n, x)
    q, r = b.binary("div", x, c), b.binary("rem", x, c)
    if x.dtype.kind == "u" or not signed:
        return q, r
    neg = b.compare("lt", r, b.scalar(0, r))
    return (b.where(neg, b.binary("sub", q, b.scalar(1, q)), q),
            b.where(neg, b.binary("add", r, c), r))


def _mulhi_halves(b, x, y, k):
    """floor(x * y / 2**k) for x, y in [0, 2**k) of a dtype of at least 2k bits, where x * y
    itself may not fit: y = yh * 2**(k/2) + yl, x * y / 2**k = (x * yh + x * yl / 2**(k/2)) /
    2**(k/2), every term below 2**(3k/2)."""
    c = b.scalar(1 << (k // 2), y)
    yh, yl = b.binary("div", y, c), b.binary("rem", y, c)
    low = b.binary("div", b.binary("mul", x, yl), c)
    return b.binary("div", b.binary("add", b.binary("mul", x, yh), low), c)


def _mulhi_wide(b, x, y):
    """High word of the 2N-bit product of N-bit (32 or 64) x and y, with no intermediate leaving
    the dtype's range (no wrap-around, no bit ops: exact on Core ML too). With x = xh * 2**(N/2)
    + xl, y = yh * 2**(N/2) + yl (xl, yl in [0, 2**(N/2)); xh, yh signed for a signed dtype):
    hi = xh * yh + floor((xh * yl + xl * yh + floor(xl * yl / 2**(N/2))) / 2**(N/2)), each
    cross term split by 2**(N/2) again so that the sum cannot overflow."""
    k = 4 * x.dtype.itemsize
    h = 1 << k
    (xh, xl), (yh, yl) = _floor_divmod(b, x, h), _floor_divmod(b, y, h)
    (aq, ar), (bq, br) = (_floor_divmod(b, b.binary("mul", xh, yl), h),
                          _floor_divmod(b, b.binary("mul", xl, yh), h))
    low = b.binary("add", b.binary("add", ar, br), _mulhi_halves(b, xl, yl, k))
    carry = b.binary("div", low, b.scalar(h, low))
    return b.binary("add", b.binary("add", b.binary("mul", xh, yh), b.binary("add", aq, bq)),
                    carry)


@jaxpr_rule("mulhi")
def _mulhi(ctx, x, y):
    """lax.mulhi: the upper N bits of the 2N-bit product. 8- and 16-bit operands widen to int32
    (their product fits, but for uint16's: _mulhi_halves) and are floor-divided by 2**N; 32- and
    64-bit ones use _mulhi_wide. Nothing relies on int64 (MLX and Core ML have none here)."""
    b, dt = ctx.b, np.dtype(x.dtype)
    if dt.itemsize >= 4:
        return _mulhi_wide(b, x, y)
    x, y = b.cast(x, np.int32), b.cast(y, np.int32)
    if dt == np.uint16:
        return b.cast(_mulhi_halves(b, x, y, 16), dt)
    hi, _ = _floor_divmod(b, b.binary("mul", x, y), 1 << (8 * dt.itemsize), dt.kind == "i")
    return b.cast(hi, dt)
