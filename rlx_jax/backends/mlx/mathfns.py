"""Special functions MLX lacks, composed from MLX ops (computed in the input's float dtype;
half types are upcast by the caller)."""
import math

import mlx.core as mx

from ..mathconsts import ERFC_CHEBYSHEV
from .mathfns64 import sin64
from .table import SIGNED, TO_UNSIGNED, bits, scalar

# Lanczos approximation, g = 7, n = 9 (relative error ~1e-15 for x >= 0.5).
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _lgamma_pos(x):
    """log Γ(x) for x >= 0.5."""
    z = x - 1.0
    a = scalar(_LANCZOS[0], x.dtype)
    for i, p in enumerate(_LANCZOS[1:], start=1):
        a = a + p / (z + float(i))
    t = z + (_LANCZOS_G + 0.5)
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * mx.log(t) - t + mx.log(a)


def lgamma(x):
    """log|Γ(x)| with the reflection formula below 0.5 (inf at the poles 0, -1, ... and at
    ±inf; exactly 0 at 1 and 2, as XLA's)."""
    small = x < 0.5
    xr = mx.where(small, 1.0 - x, x)
    pos = _lgamma_pos(xr)
    sin = sin64 if x.dtype == mx.float64 else mx.sin
    # |sin(pi x)| from x less its nearest integer, which keeps a tiny x whole (x - floor(x)
    # rounded -1e-30 up to 1.0: lgamma(-1e-30) came out 17.4, not 69.1)
    s = mx.abs(sin(math.pi * (x - mx.round(x))))
    refl = math.log(math.pi) - mx.log(s) - pos
    r = mx.where(small, refl, pos)
    r = mx.where((x == 1.0) | (x == 2.0), scalar(0.0, x.dtype), r)
    return mx.where(mx.isinf(x), scalar(math.inf, x.dtype), r)


def digamma(x):
    """ψ(x): shift to x >= 6 by recurrence, asymptotic series; reflection below 0.5."""
    small = x < 0.5
    y = mx.where(small, 1.0 - x, x)
    acc = mx.zeros_like(y)
    for k in range(6):
        acc = acc + 1.0 / (y + float(k))
    y = y + 6.0
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (1.0 / 252 - inv2 * (
        1.0 / 240 - inv2 * (1.0 / 132)))))
    psi = mx.log(y) - 0.5 * inv - series - acc
    frac = x - mx.round(x)                   # tan(pi x) from x less its nearest integer
    refl = psi - math.pi / mx.tan(math.pi * frac)
    r = mx.where(small, refl, psi)
    pole = (x <= 0) & (frac == 0)
    return mx.where(pole, scalar(float("nan"), x.dtype), r)


# erf's Maclaurin series, 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)): seven terms leave a
# truncation below 1e-9 relative for |x| < 0.5
_ERF_SERIES = tuple(2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
                    for n in range(7))


def erf(x):
    """mx.erf, except below |x| = 0.5: the series there. mx.erf loses small arguments (measured,
    mlx 0.32.4 CPU: erf(1e-5) 2% low, erf(1e-8) = 0, erf(-0.0) = -0.0 but erf(+0.0) = -0.0 too,
    7.7 ulp at |x| = 0.1); it is within 4 ulp from 0.5 on, as XLA's erf is."""
    z = x * x
    poly = scalar(_ERF_SERIES[-1], x.dtype)
    for c in reversed(_ERF_SERIES[:-1]):
        poly = c + z * poly
    return mx.where(mx.abs(x) < 0.5, x * poly, mx.erf(x))


def erfc(x):
    """1 - erf(x) near 0; a Chebyshev fit of erfc (fractional error < 1.2e-7) elsewhere."""
    z = mx.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = scalar(ERFC_CHEBYSHEV[-1], x.dtype)
    for c in reversed(ERFC_CHEBYSHEV[:-1]):
        poly = c + t * poly
    tail = t * mx.exp(-z * z + poly)
    tail = mx.where(x >= 0, tail, 2.0 - tail)
    return mx.where(z < 0.5, 1.0 - erf(x), tail)


def population_count(x):
    """Bit count per element (SWAR on the unsigned view)."""
    if x.dtype == mx.bool_:
        return x
    u = TO_UNSIGNED[x.dtype]
    n = bits(x.dtype)
    v = x.view(u)

    def c(pattern):
        return scalar(int.from_bytes(bytes([pattern]) * (n // 8), "little"), u)
    v = v - mx.bitwise_and(mx.right_shift(v, scalar(1, u)), c(0x55))
    v = mx.bitwise_and(v, c(0x33)) + mx.bitwise_and(mx.right_shift(v, scalar(2, u)), c(0x33))
    v = mx.bitwise_and(v + mx.right_shift(v, scalar(4, u)), c(0x0F))
    if n > 8:
        v = mx.right_shift(v * c(0x01), scalar(n - 8, u))
    return v.view(x.dtype) if x.dtype in SIGNED else v
