"""Elementwise kinds: Constant, Iota, Activation, Binary, Compare, Where, Cast, Bitcast,
ReducePrecision, with JAX's exact integer, NaN and shift semantics."""
import math

import mlx.core as mx

from ...ir.ops import OpKind as K
from .mathfns import digamma, erf, erfc, lgamma, population_count
from .mathfns64 import cos64, erf64, erfc64, erfinv64, exp64, sigmoid64, sin64
from .table import (HALF, INEXACT, SIGNED, TO_SIGNED, TO_UNSIGNED, UNSIGNED, bits, highest,
                    is_float, is_inexact, lowest, mlx_rule, out_dtype, scalar, unsupported)


@mlx_rule(K.Constant)
def _constant(ctx, node):
    return ctx.constant(node)


@mlx_rule(K.Iota)
def _iota(ctx, node):
    a = node.attrs
    shape, dim = a["shape"], a["dimension"]
    dt = out_dtype(node)
    # a float iota is the integer iota converted, as XLA's: mx.arange counts in the float
    # type itself and stalls where it stops holding integers (measured, mlx 0.32.4: float16
    # at 2,048, bfloat16 at 256)
    r = mx.arange(shape[dim], dtype=mx.int32).astype(dt) if dt in INEXACT else \
        mx.arange(shape[dim], dtype=dt)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return mx.broadcast_to(r.reshape(view), tuple(shape))


def _upcast(fn):
    """Half-precision inputs are computed in float32 and rounded once, as XLA's CPU does."""
    def run(x):
        if x.dtype in HALF:
            return fn(x.astype(mx.float32)).astype(x.dtype)
        return fn(x)
    return run


def _f64(fn, fn64):
    """fn, or its float64-accurate composition for float64 operands (see mathfns64)."""
    return lambda x: fn64(x) if x.dtype == mx.float64 else fn(x)


def jax_sign(x):
    """NaN and zeros are their own sign (JAX: sign(-0.0) is -0.0; MLX gives +0.0)."""
    s = mx.sign(x)
    return mx.where(mx.isnan(x) | (x == 0), x, s) if is_float(x) else s


def _round_away(x):
    t = mx.trunc(x) if hasattr(mx, "trunc") else mx.where(x < 0, mx.ceil(x), mx.floor(x))
    frac = mx.abs(x - t)
    return mx.where(frac >= 0.5, t + mx.sign(x), t)


def _cbrt(x):
    return jax_sign(x) * mx.power(mx.abs(x), scalar(1.0 / 3.0, x.dtype))


def _not(x):
    return mx.logical_not(x) if x.dtype == mx.bool_ else mx.bitwise_invert(x)


def _gelu(x):
    erf = erf64 if x.dtype == mx.float64 else mx.erf
    return x * 0.5 * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def _gelu_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + mx.tanh(c * (x + 0.044715 * x * x * x)))


UNARY = {
    "neg": mx.negative, "abs": mx.abs, "sign": jax_sign, "floor": mx.floor, "ceil": mx.ceil,
    "is_finite": mx.isfinite, "not": _not, "square": mx.square,
    "population_count": population_count, "relu": lambda x: mx.maximum(x, scalar(0, x.dtype)),
    **{k: _upcast(f) for k, f in {
        "exp": _f64(mx.exp, exp64), "exp2": lambda x: mx.power(scalar(2.0, x.dtype), x),
        "log": mx.log, "log1p": mx.log1p, "expm1": mx.expm1, "tanh": mx.tanh,
        "sigmoid": _f64(mx.sigmoid, sigmoid64), "sin": _f64(mx.sin, sin64),
        "cos": _f64(mx.cos, cos64), "tan": mx.tan, "asin": mx.arcsin, "acos": mx.arccos,
        "atan": mx.arctan, "sinh": mx.sinh, "cosh": mx.cosh, "asinh": mx.arcsinh,
        "acosh": mx.arccosh, "atanh": mx.arctanh, "sqrt": mx.sqrt, "rsqrt": mx.rsqrt,
        "cbrt": _cbrt, "erf": _f64(erf, erf64), "erfc": _f64(erfc, erfc64),
        "erf_inv": _f64(mx.erfinv, erfinv64), "lgamma": lgamma, "digamma": digamma,
        "gelu": _gelu, "gelu_tanh": _gelu_tanh,
        "silu": lambda x: x * (sigmoid64(x) if x.dtype == mx.float64 else mx.sigmoid(x))}.items()},
}


def _integer_pow(x, y):
    if y == 0:
        return mx.ones_like(x)
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else acc * base
        n >>= 1
        if n:
            base = base * base
    return mx.reciprocal(acc) if y < 0 else acc


@mlx_rule(K.Activation)
def _activation(ctx, node, x):
    fn = node.attrs["fn"]
    if fn == "integer_pow":
        return _integer_pow(x, node.attrs["y"])
    if fn == "round":
        return mx.round(x) if node.attrs.get("rounding", 0) == 1 else _round_away(x)
    if fn not in UNARY:
        unsupported(node, f"unary function {fn!r}")
    return UNARY[fn](x)


# ---- binary ----
def _guard_int_div(x, y):
    """Divisor with /0 and MIN/-1 (undefined in C) replaced by 1; the masks for fixing up."""
    zero = y == 0
    bad = zero
    if x.dtype in SIGNED:
        bad = bad | ((x == scalar(lowest(x.dtype), x.dtype)) & (y == scalar(-1, y.dtype)))
    return mx.where(bad, scalar(1, y.dtype), y), zero, bad


def _div(x, y):
    if is_inexact(x):
        return mx.divide(x, y)
    ys, zero, bad = _guard_int_div(x, y)
    q = mx.floor_divide(x, ys)
    if x.dtype in SIGNED:
        r = mx.remainder(x, ys)
        fix = (r != 0) & ((x < 0) != (ys < 0))           # floor -> truncation toward zero
        q = mx.where(fix, q + scalar(1, q.dtype), q)
        q = mx.where(bad & ~zero, x, q)                  # MIN / -1 wraps to MIN
    return mx.where(zero, scalar(-1, x.dtype), q)        # x / 0 = -1 (all ones), as XLA


def _rem(x, y):
    if is_float(x):
        # fmod(x, y) = sign(x) fmod(|x|, |y|): the remainder of the magnitudes, given x's sign
        # (mx.remainder of signed operands, Python's mod, then shifted by y, lost a remainder
        # far smaller than y: -1e-30 mod 0.9999999 came out 0, not -1e-30)
        r = mx.remainder(mx.abs(x), mx.abs(y))
        negative = (x < 0) | ((x == 0) & (mx.reciprocal(x) < 0))         # -0.0 included
        return mx.where(negative, -r, r)
    ys, zero, bad = _guard_int_div(x, y)
    r = mx.remainder(x, ys)
    if x.dtype in SIGNED:
        fix = (r != 0) & ((r < 0) != (x < 0))
        r = mx.where(fix, r - ys, r)
        r = mx.where(bad & ~zero, scalar(0, x.dtype), r)
    return mx.where(zero, x, r)                          # x % 0 = x, as XLA


def _pow(x, y):
    if is_inexact(x):
        return mx.power(x, y)
    zero, one = scalar(0, x.dtype), scalar(1, x.dtype)
    p = mx.power(x, mx.maximum(y, zero))
    if x.dtype not in SIGNED:
        return p
    odd = mx.remainder(y, scalar(2, y.dtype)) != 0
    neg_case = mx.where(x == one, one, mx.where(x == -one, mx.where(odd, -one, one), zero))
    return mx.where(y < 0, neg_case, p)


def _shift(kind):
    def run(x, y):
        u = TO_UNSIGNED[x.dtype]
        n = bits(x.dtype)
        big = y.view(u) >= scalar(n, u) if x.dtype in SIGNED else y >= scalar(n, x.dtype)
        ys = mx.where(big, scalar(0, y.dtype), y)
        if kind == "left":
            return mx.where(big, scalar(0, x.dtype), mx.left_shift(x, ys))
        if kind == "logical":
            r = mx.right_shift(x.view(u), ys.view(u)).view(x.dtype)
            return mx.where(big, scalar(0, x.dtype), r)
        si = TO_SIGNED[x.dtype]                           # unsigned: the top bit fills
        xs = x.view(si)
        fill = mx.where(xs < 0, scalar(-1, si), scalar(0, si))
        return mx.where(big, fill, mx.right_shift(xs, ys.view(si))).view(x.dtype)
    return run


def _nextafter(x, y):
    si = TO_SIGNED[x.dtype]
    xb = x.view(si)
    one = scalar(1, si)
    toward_zero = (x > y) == (x > 0)                     # |x| shrinks: bits - 1
    step = mx.where(toward_zero, xb - one, xb + one)
    sign_bit = scalar(-(2 ** (bits(x.dtype) - 1)), si)
    tiny = mx.where(y > 0, one, sign_bit | one)          # smallest subnormal toward y
    r = mx.where(x == 0, tiny, step).view(x.dtype)
    r = mx.where(x == y, y, r)
    return mx.where(mx.isnan(x) | mx.isnan(y), x + y, r)


def _logical(bool_fn, int_fn):
    return lambda x, y: bool_fn(x, y) if x.dtype == mx.bool_ else int_fn(x, y)


BINARY = {
    "add": _logical(mx.logical_or, mx.add), "sub": mx.subtract,
    "mul": _logical(mx.logical_and, mx.multiply), "div": _div, "rem": _rem, "pow": _pow,
    "max": _logical(mx.logical_or, mx.maximum), "min": _logical(mx.logical_and, mx.minimum),
    "atan2": lambda x, y: _upcast(lambda a: mx.arctan2(a, y.astype(a.dtype)))(x),
    "nextafter": _nextafter,
    "and": _logical(mx.logical_and, mx.bitwise_and),
    "or": _logical(mx.logical_or, mx.bitwise_or),
    "xor": _logical(mx.not_equal, mx.bitwise_xor),
    "shift_left": _shift("left"), "shift_right_logical": _shift("logical"),
    "shift_right_arithmetic": _shift("arithmetic"),
}


@mlx_rule(K.Binary)
def _binary(ctx, node, x, y):
    fn = node.attrs["fn"]
    if fn not in BINARY:
        unsupported(node, f"binary function {fn!r}")
    return BINARY[fn](x, y)


COMPARE = {"eq": mx.equal, "ne": mx.not_equal, "lt": mx.less, "le": mx.less_equal,
           "gt": mx.greater, "ge": mx.greater_equal}
mlx_rule(K.Compare)(lambda ctx, node, x, y: COMPARE[node.attrs["fn"]](x, y))
mlx_rule(K.Where)(lambda ctx, node, p, x, y: mx.where(p, x, y))


def _float_to_int(x, dt):
    """XLA's conversion: truncate toward zero, NaN -> 0, saturate at the integer range."""
    if x.dtype in HALF:
        x = x.astype(mx.float32)
    lo, hi = lowest(dt), highest(dt)
    r = x.astype(dt)
    r = mx.where(x >= float(hi) + 1.0, scalar(hi, dt), r)
    r = mx.where(x <= float(lo) - 1.0 if lo < 0 else x <= -1.0, scalar(lo, dt), r)
    return mx.where(mx.isnan(x), scalar(0, dt), r)


@mlx_rule(K.Cast)
def _cast(ctx, node, x):
    dt = out_dtype(node)
    if x.dtype == dt:
        return x
    if dt == mx.bool_:
        return mx.not_equal(x, scalar(0, x.dtype))
    if x.dtype == mx.complex64 and dt != mx.complex64:    # JAX: the real part
        x = mx.real(x)
    if is_float(x) and (dt in SIGNED or dt in UNSIGNED):
        return _float_to_int(x, dt)
    return x.astype(dt)


@mlx_rule(K.Bitcast)
def _bitcast(ctx, node, x):
    dt = out_dtype(node)
    if x.dtype == mx.bool_ or dt == mx.bool_:
        unsupported(node, "bitcast of bool")
    if x.ndim == 0:          # MLX views a scalar only as a type of the same size
        x = x.reshape((1,))
    r = x.view(dt)
    return r.reshape(node.out.shape)


@mlx_rule(K.ReducePrecision)
def _reduce_precision(ctx, node, x):
    """Rounds the mantissa (to nearest even) and clamps the exponent range, on the raw bits."""
    e_bits, m_bits = node.attrs["exponent_bits"], node.attrs["mantissa_bits"]
    src_m, src_e = {mx.float16: (10, 5), mx.bfloat16: (7, 8), mx.float32: (23, 8),
                    mx.float64: (52, 11)}[x.dtype]
    u = TO_UNSIGNED[x.dtype]
    nb = bits(x.dtype)

    def c(v):
        return scalar(v, u)
    xb = x.view(u)
    if m_bits < src_m:
        last = 1 << (src_m - m_bits)
        lsb = mx.right_shift(mx.bitwise_and(xb, c(last)), c(src_m - m_bits))
        xb = mx.bitwise_and(xb + lsb + c((last >> 1) - 1), c(((1 << nb) - 1) ^ (last - 1)))
    if e_bits < src_e:
        sign = 1 << (nb - 1)
        exp_mask = ((1 << src_e) - 1) << src_m
        bias, rbias = (1 << (src_e - 1)) - 1, (1 << (e_bits - 1)) - 1
        xe = mx.bitwise_and(xb, c(exp_mask))
        over = xe > c((bias + rbias) << src_m)
        under = xe <= c((bias - rbias) << src_m)
        szero = mx.bitwise_and(xb, c(sign))
        xb = mx.where(over, mx.bitwise_or(szero, c(exp_mask)), mx.where(under, szero, xb))
    r = xb.view(x.dtype)
    return mx.where(mx.isnan(x), x, r) if m_bits > 0 else r
