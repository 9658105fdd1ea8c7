"""Special functions MIL has no op for, composed from MIL elementwise ops: erf_inv, lgamma and
digamma, and erfc (Activation fns, registered in UNARY_FNS for the Activation rule of
mil/elementwise.py).

Each is the expansion XLA gives the function on CPU (what JAX computes), step for step:
- erf_inv: M. Giles' single-precision approximation. With w = -log1p(-x^2), a degree-8
  polynomial in w - 2.5 (w < 5) or in sqrt(w) - 3 (w >= 5), times x; erf_inv(+-1) = +-inf and
  NaN for |x| > 1.
- lgamma: the Lanczos approximation (g = 7, 9 coefficients) for x >= 0.5, and the reflection
  formula log(pi) - lgamma(1 - x) - log|sin(pi x)| below, with sin's argument reduced to
  [0, 1/2] through |x| - floor|x|; +inf at the poles 0, -1, ... and at +-inf.
- digamma: the derivative of the same Lanczos sum for x >= 0.5, and the reflection formula
  digamma(1 - x) - pi cot(pi x) below, with x shifted into [-1/2, 1/2] first; NaN at the poles
  0, -1, ... and at -inf.
- erfc: 1 - erf(x) below |x| = 1/2, a Chebyshev fit of the tail above (mathconsts.py).
float16 operands are computed in float32 and the result cast back, as XLA does.
"""
import math

import numpy as np

from ...mathconsts import ERFC_CHEBYSHEV
from .elementwise import log1p
from .table import unary_fn

# Giles' erf_inv coefficients, highest power first: (w < 5, w >= 5)
ERF_INV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
ERF_INV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)

# Lanczos approximation, g = 7: the base coefficient and those of 1 / (z + k), k = 1..8
LANCZOS_G = 7.0
LANCZOS_BASE = 0.99999999999980993227684700473478
LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
           771.3234287776530788486528258894, -176.61502916214059906584551354,
           12.507343278686904814458936853, -0.13857109526572011689554707,
           9.984369578019570859563e-6, 1.50563273514931155834e-7)


class _F32:
    """float32 arithmetic on MIL Vars: short names for the ops the compositions chain."""

    def __init__(self, ctx):
        self.ctx, self.mb = ctx, ctx.mb

    def c(self, value):
        return self.ctx.const(np.float32(value))

    def add(self, x, y):
        return self.mb.add(x=x, y=y)

    def sub(self, x, y):
        return self.mb.sub(x=x, y=y)

    def mul(self, x, y):
        return self.mb.mul(x=x, y=y)

    def div(self, x, y):
        return self.mb.real_div(x=x, y=y)

    def log(self, x):
        return self.mb.log(x=x, epsilon=self.c(0))

    def sel(self, cond, a, b):
        return self.mb.select(cond=cond, a=a, b=b)

    def lt(self, x, y):
        return self.mb.less(x=x, y=y)

    def eq(self, x, y):
        return self.mb.equal(x=x, y=y)

    def is_finite(self, x):
        """x - x == 0: NaN for infinities and NaN (no float32-only bound, which a float16
        compute precision would turn into inf)."""
        return self.eq(self.sub(x, x), self.c(0.0))


def _in_f32(fn):
    """Registers `fn(f, x)` (x float32) as an Activation fn of any float dtype: float16 operands
    are cast to float32 and the result back."""
    def rule(ctx, node, x):
        half = ctx.np_dtype(x) != np.float32
        y = fn(_F32(ctx), ctx.mb.cast(x=x, dtype="fp32") if half else x)
        return ctx.mb.cast(x=y, dtype="fp16") if half else y
    return rule


def _erf_inv(f, x):
    w = f.mul(log1p(f.ctx, f.mul(x, f.mul(x, f.c(-1)))), f.c(-1))
    central = f.lt(w, f.c(5.0))
    s = f.sel(central, f.sub(w, f.c(2.5)), f.sub(f.mb.sqrt(x=w), f.c(3.0)))
    # both polynomials, then a select: the same values as selecting each coefficient (MIL's
    # select of two scalars would not take the condition's shape)
    p = f.sel(central, _horner(f, s, ERF_INV_CENTRAL), _horner(f, s, ERF_INV_TAIL))
    at_one = f.eq(f.mb.abs(x=x), f.c(1.0))
    return f.sel(at_one, f.mul(x, f.c(np.inf)), f.mul(p, x))


def _erfc(f, x):
    """1 - erf(x) below |x| = 1/2; above, the Chebyshev fit t exp(-z^2 + P(t)), t = 1 / (1 +
    z/2), z = |x| (fractional error < 1.2e-7), 2 minus it for x < 0. 1 - erf(x) alone loses
    the tail: 0 from x = 4 on, where erfc(4) = 1.5e-8."""
    z = f.mb.abs(x=x)
    t = f.div(f.c(1.0), f.add(f.c(1.0), f.mul(z, f.c(0.5))))
    poly = _horner(f, t, ERFC_CHEBYSHEV[::-1])
    tail = f.mul(t, f.mb.exp(x=f.sub(poly, f.mul(z, z))))
    tail = f.sel(f.lt(x, f.c(0.0)), f.sub(f.c(2.0), tail), tail)
    return f.sel(f.lt(z, f.c(0.5)), f.sub(f.c(1.0), f.mb.erf(x=x)), tail)


def _horner(f, s, coeffs):
    p = f.c(coeffs[0])
    for coeff in coeffs[1:]:
        p = f.add(f.c(coeff), f.mul(p, s))
    return p


def _lanczos_z(f, x):
    """(x < 1/2, z): the Lanczos sums are taken at z = x - 1, or at z = -x (for 1 - x) where
    the reflection formula applies."""
    reflect = f.lt(x, f.c(0.5))
    return reflect, f.sel(reflect, f.mul(x, f.c(-1)), f.sub(x, f.c(1.0)))


def _log_t(f, z):
    """log(z + g + 1/2), as log(g + 1/2) + log1p(z / (g + 1/2))."""
    ratio = f.mul(z, f.c(1.0 / (LANCZOS_G + 0.5)))
    return f.add(log1p(f.ctx, ratio), f.c(math.log(LANCZOS_G + 0.5)))


def _lgamma(f, x):
    reflect, z = _lanczos_z(f, x)
    a = f.c(LANCZOS_BASE)
    for k, coeff in enumerate(LANCZOS, start=1):
        a = f.add(a, f.div(f.c(coeff), f.add(z, f.c(k))))
    t = f.add(z, f.c(LANCZOS_G + 0.5))
    log_t = _log_t(f, z)
    # (z + 1/2) log t - t, as (z + 1/2 - t / log t) log t: no overflow for large t
    r = f.mul(f.sub(f.add(z, f.c(0.5)), f.div(t, log_t)), log_t)
    lg = f.add(f.add(r, f.c(0.5 * math.log(2 * math.pi))), f.log(a))
    ax = f.mb.abs(x=x)
    frac = f.sub(ax, f.mb.floor(x=ax))
    frac = f.sel(f.lt(f.c(0.5), frac), f.sub(f.c(1.0), frac), frac)
    log_sin = f.log(f.mb.sin(x=f.mul(frac, f.c(math.pi))))
    # log|sin| = -inf at a pole: the result is +inf there (not -inf - inf)
    refl = f.sel(f.is_finite(log_sin), f.sub(f.sub(f.c(math.log(math.pi)), log_sin), lg),
                 f.mul(log_sin, f.c(-1)))
    out = f.sel(reflect, refl, lg)
    return f.sel(f.eq(ax, f.c(np.inf)), f.c(np.inf), out)


def _digamma(f, x):
    reflect, z = _lanczos_z(f, x)
    num, den = f.c(0.0), f.c(LANCZOS_BASE)
    for k, coeff in enumerate(LANCZOS, start=1):
        zk = f.add(z, f.c(k))
        num = f.sub(num, f.div(f.c(coeff), f.mul(zk, zk)))
        den = f.add(den, f.div(f.c(coeff), zk))
    t = f.add(z, f.c(LANCZOS_G + 0.5))
    y = f.sub(f.add(_log_t(f, z), f.div(num, den)), f.div(f.c(LANCZOS_G), t))
    floor = f.mb.floor(x=x)
    shifted = f.add(x, f.mb.abs(x=f.mb.floor(x=f.add(x, f.c(0.5)))))
    arg = f.mul(shifted, f.c(math.pi))
    cot = f.div(f.mul(f.mb.cos(x=arg), f.c(math.pi)), f.mb.sin(x=arg))
    out = f.sel(reflect, f.sub(y, cot), y)
    pole = f.mb.logical_and(x=f.mb.less_equal(x=x, y=f.c(0.0)), y=f.eq(x, floor))
    return f.sel(pole, f.c(np.nan), out)


unary_fn("erf_inv")(_in_f32(_erf_inv))
unary_fn("erfc")(_in_f32(_erfc))
unary_fn("lgamma")(_in_f32(_lgamma))
unary_fn("digamma")(_in_f32(_digamma))
