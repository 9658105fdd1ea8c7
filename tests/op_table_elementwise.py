"""Op-table cases: elementwise unary, binary, bitwise, comparisons, selects and conversions."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from .op_table_base import (BF16, BOOL, F16, F32, FLOATS, I32, INTS, SHORT, U32, Case, args,
                            arr, const, f32, over)

NAN, INF = float("nan"), float("inf")


def _unary(name, fn, lo=-2.0, hi=2.0, dtypes=FLOATS, grad=True, special=(), scale=1.0):
    return over(name, fn, dtypes, lambda dt: args(arr(dt, 3, 5, lo=lo, hi=hi, special=special)),
                grad=grad, scale=scale)


def _binary(name, fn, dtypes, lo=-3, hi=3, lo2=None, hi2=None, grad=False, scale=1.0):
    lo2 = lo if lo2 is None else lo2
    hi2 = hi if hi2 is None else hi2
    return over(name, fn, dtypes, lambda dt: args(arr(dt, 3, 4, lo=lo, hi=hi),
                                                  arr(dt, 3, 4, lo=lo2, hi=hi2)),
                grad=grad, scale=scale)


UNARY_CASES = [
    *_unary("neg", lax.neg), *_unary("neg", lax.neg, dtypes=(I32,), grad=False),
    *_unary("abs", lax.abs), *_unary("abs", lax.abs, dtypes=(I32,), grad=False),
    *_unary("sign", lax.sign, grad=False, special=(0.0, -0.0, NAN, -INF)),
    *_unary("sign", lax.sign, dtypes=(I32,), grad=False),
    *_unary("sign", lax.sign, dtypes=(U32,), lo=0, grad=False),
    *_unary("floor", lax.floor, grad=False, special=(-0.5, 0.5, 2.0)),
    *_unary("ceil", lax.ceil, grad=False, special=(-0.5, 0.5, 2.0)),
    # jnp.round: half to even; lax.round default: half away from zero
    *_unary("round_even", jnp.round, lo=-4, hi=4, grad=False,
            special=(0.5, 1.5, 2.5, -0.5, -2.5)),
    *_unary("round_away", lax.round, lo=-4, hi=4, grad=False, special=(0.5, 1.5, -0.5, -2.5)),
    *_unary("is_finite", jnp.isfinite, grad=False, special=(NAN, INF, -INF, 1.0)),
    *_unary("exp", lax.exp), *_unary("exp2", jnp.exp2),
    *_unary("log", lax.log, lo=0.1, hi=4.0), *_unary("log1p", lax.log1p, lo=-0.5, hi=3.0),
    *_unary("expm1", lax.expm1),
    Case("log1p_expm1_tiny_f32", lambda x: (lax.log1p(x), lax.expm1(x)),
         args(const([1e-7, -3e-8, 1e-20, 0.0], F32)), atol=0, rtol=1e-6), *_unary("tanh", lax.tanh),
    *_unary("logistic", jax.nn.sigmoid, lo=-6, hi=6),
    *_unary("sin", lax.sin), *_unary("cos", lax.cos), *_unary("tan", lax.tan, lo=-1.2, hi=1.2),
    *_unary("asin", lax.asin, lo=-0.9, hi=0.9), *_unary("acos", lax.acos, lo=-0.9, hi=0.9),
    *_unary("atan", lax.atan, lo=-4, hi=4),
    *_unary("sinh", lax.sinh), *_unary("cosh", lax.cosh), *_unary("asinh", lax.asinh, lo=-4),
    *_unary("acosh", lax.acosh, lo=1.1, hi=4.0), *_unary("atanh", lax.atanh, lo=-0.9, hi=0.9),
    *_unary("sqrt", lax.sqrt, lo=0.1, hi=4.0), *_unary("rsqrt", lax.rsqrt, lo=0.1, hi=4.0),
    *_unary("cbrt", lax.cbrt, lo=-4, hi=4),
    *_unary("square", jnp.square), *_unary("square", jnp.square, dtypes=(I32,), grad=False),
    *_unary("erf", lax.erf), *_unary("erfc", lax.erfc),
    # erfc's tail, which 1 - erf(x) loses (0 from x = 4 on, erfc(4) = 1.5e-8), relative to it
    Case("erfc_tail_f32", lax.erfc, args(const([0.3, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, -3.0, INF,
                                                -INF, NAN], F32)), atol=0, rtol=2e-5),
    # small arguments, which mx.erf loses (erf(1e-5) 2% low, erf(1e-8) = 0)
    Case("erf_small_f32", lax.erf, args(const([1e-20, 1e-8, -1e-5, 1e-3, -0.1, 0.3, 0.49, 0.5,
                                               1.5, 0.0, -0.0], F32)), atol=0, rtol=1e-6),
    *_unary("erf_inv", lax.erf_inv, lo=-0.9, hi=0.9, scale=2.0),
    *_unary("lgamma", lax.lgamma, lo=0.1, hi=5.0, scale=2.0),
    *_unary("digamma", lax.digamma, lo=0.2, hi=5.0, scale=2.0, grad=False),
    # the reflection's tiny and negative arguments, the zeros at 1 and 2, poles, infinities
    Case("lgamma_digamma_special_f32", lambda x: (lax.lgamma(x), lax.digamma(x)),
         args(const([-1e-30, 1e-30, -1e-5, 1.0, 2.0, -1.0, -2.5, -0.5, 0.3, -3.7, 1e30, INF, -INF,
                     NAN, -100.25], F32)), atol=1e-5, rtol=1e-5),
    *_unary("integer_pow3", lambda x: x ** 3),
    *_unary("integer_pow_neg2", lambda x: lax.integer_pow(x, -2), lo=0.5, hi=2.0),
    *_unary("integer_pow2", lambda x: x ** 2, dtypes=(I32,), grad=False),
    *over("not", lax.bitwise_not, (I32, U32, BOOL), lambda dt: args(arr(dt, 3, 4, lo=-9, hi=9))),
    *over("population_count", lax.population_count, (I32, U32),
          lambda dt: args(arr(dt, 3, 4, lo=-1000, hi=1000))),
]

_SHIFT_AMOUNTS = [[0, 1, 5, 31], [32, 33, 40, 7], [2, 3, 30, 64]]
_SHIFTED = [[1, -1, 12345, -7], [-2 ** 31, 2 ** 31 - 1, 3, -3], [100, -100, 1, 9]]


def _shift(name, fn):
    return [Case(f"{name}_{dt}", fn, args(const(np.asarray(_SHIFTED).astype(np.int64)
                                                .astype(dt), dt),
                                          const(_SHIFT_AMOUNTS, dt)))
            for dt in ("int32", "uint32")]


def _mulhi_edges(dt, top=None):
    """Every pair of a dtype's edge values (min, max, 0, +-1, +-2, around 2**(N/2)), then
    random ones; `top` caps them (uint32 within int32 range, which Core ML can hold)."""
    info = np.iinfo(dt)
    hi = int(info.max) if top is None else top
    half = 1 << (4 * np.dtype(dt).itemsize)
    edge = sorted({v for v in (int(info.min), hi, 0, 1, -1, 2, -2, hi - 1, int(info.min) + 1,
                               half, half - 1, -half, hi // 3) if info.min <= v <= hi})
    xs = [a for a in edge for _ in edge]
    ys = [b for _ in edge for b in edge]

    def make(r):
        rand = r.randint(int(info.min), hi + 1, size=(2, 64), dtype=np.int64)
        return tuple(np.asarray(v + list(w)).astype(dt) for v, w in ((xs, rand[0]), (ys, rand[1])))
    return make


# lax.mulhi: the high half of the 2N-bit product (frontend/rules/elementwise.py decomposes it);
# jax 0.9 has no lax.mulhi, so there the table has no mulhi cases
MULHI_CASES = [] if not hasattr(lax, "mulhi") else [
    *[Case(f"mulhi_{SHORT[dt]}", lax.mulhi, _mulhi_edges(dt))
      for dt in ("int8", "int16", I32, "uint8", "uint16")],
    Case("mulhi_u32", lax.mulhi, _mulhi_edges(U32, top=2 ** 31 - 1)),
    Case("mulhi_u32_above_int32", lax.mulhi, _mulhi_edges(U32)),
    Case("mulhi_scalar_i16", lambda x: lax.mulhi(x, jnp.int16(-300)),
         lambda r: _mulhi_edges("int16")(r)[:1]),
]

BINARY_CASES = [
    *MULHI_CASES,
    *_binary("add", lax.add, FLOATS + INTS, grad=True), *_binary("sub", lax.sub, FLOATS + (I32,),
                                                                 grad=True),
    *_binary("mul", lax.mul, FLOATS + INTS, grad=True),
    # integer arithmetic wraps around
    Case("sub_u32_wrap", lax.sub, args(const([0, 1, 5, 2 ** 32 - 1], U32),
                                       const([1, 2, 3, 2 ** 32 - 1], U32))),
    Case("add_mul_i32_wrap", lambda x, y: (x + y, x * y),
         args(const([2 ** 31 - 1, -2 ** 31, 65536, -7], I32), const([1, -1, 65536, 3], I32))),
    *_binary("div", lax.div, FLOATS, lo2=0.5, hi2=3.0, grad=True),
    # integer division truncates toward zero; rem takes the dividend's sign
    Case("div_i32_signs", lax.div, args(const([[7, -7, 7, -7], [1, -9, 0, 5]], I32),
                                        const([[2, 2, -2, -2], [3, 4, 5, -6]], I32))),
    Case("rem_i32_signs", lax.rem, args(const([[7, -7, 7, -7], [1, -9, 0, 5]], I32),
                                        const([[2, 2, -2, -2], [3, 4, 5, -6]], I32))),
    Case("div_u32", lax.div, args(arr(U32, 3, 4, lo=0, hi=100), arr(U32, 3, 4, lo=1, hi=9))),
    Case("rem_u32", lax.rem, args(arr(U32, 3, 4, lo=0, hi=100), arr(U32, 3, 4, lo=1, hi=9))),
    Case("jnp_floor_divide_i32", jnp.floor_divide, args(arr(I32, 3, 4, lo=-20, hi=20),
                                                    const([[3, -3, 4, -4]] * 3, I32))),
    Case("jnp_remainder_i32", jnp.remainder, args(arr(I32, 3, 4, lo=-20, hi=20),
                                              const([[3, -3, 4, -4]] * 3, I32))),
    *_binary("rem", lax.rem, FLOATS, lo=-5, hi=5, lo2=0.5, hi2=2.0, grad=True),
    Case("rem_f32_signs", lax.rem, args(const([5.5, -5.5, 5.5, -5.5, 0.0], F32),
                                        const([2.0, 2.0, -2.0, -2.0, 3.0], F32))),
    # remainders far smaller than the divisor, signed zeros, NaN (fmod(0, 0)), infinities, and
    # jnp's floor division / Python mod built on them
    *over("rem_special", lambda x, y: (lax.rem(x, y), jnp.floor_divide(x, y),
                                       jnp.remainder(x, y)), (F32, F16),
          lambda dt: args(const([-1e-3, 1e-3, -0.0, 0.0, 0.0, -3e4, 7.0, INF, 5.0], dt),
                          const([0.9999, 0.9999, 2.0, 0.0, NAN, 0.9999, INF, 3.0, -INF], dt))),
    *_binary("pow", lax.pow, FLOATS, lo=0.2, hi=3.0, lo2=-2.0, hi2=2.0, grad=True, scale=2.0),
    *_binary("max", lax.max, FLOATS + INTS, grad=True),
    *_binary("min", lax.min, FLOATS + INTS, grad=True),
    Case("max_nan_f32", lax.max, args(const([NAN, 1.0, -INF, 0.0], F32),
                                      const([1.0, NAN, 2.0, -0.0], F32))),
    Case("min_nan_f32", lax.min, args(const([NAN, 1.0, INF, 0.0], F32),
                                      const([1.0, NAN, 2.0, -0.0], F32))),
    *_binary("atan2", lax.atan2, FLOATS, grad=True, scale=2.0),
    Case("atan2_signed_zeros_f32", lax.atan2, args(const([0.0, -0.0, 0.0, -0.0, 1.0, -1.0], F32),
                                                   const([0.0, 0.0, -0.0, -0.0, -INF, -INF],
                                                         F32))),
    Case("pow_special_f32", lax.pow, args(const([0.0, 0.0, -2.0, -2.0, 2.0, INF, 1.0], F32),
                                          const([0.0, -1.0, 0.5, 3.0, -INF, 0.0, NAN], F32))),
    *_binary("nextafter", lax.nextafter, (F32,)),
    Case("nextafter_special_f32", lax.nextafter, args(const([0.0, 1.0, -1.0, NAN, 1.0], F32),
                                                      const([1.0, 2.0, -2.0, 0.0, 1.0], F32))),
    *over("and", lax.bitwise_and, (I32, U32, BOOL),
          lambda dt: args(arr(dt, 3, 4, lo=-50, hi=50), arr(dt, 3, 4, lo=-50, hi=50))),
    *over("or", lax.bitwise_or, (I32, U32, BOOL),
          lambda dt: args(arr(dt, 3, 4, lo=-50, hi=50), arr(dt, 3, 4, lo=-50, hi=50))),
    *over("xor", lax.bitwise_xor, (I32, U32, BOOL),
          lambda dt: args(arr(dt, 3, 4, lo=-50, hi=50), arr(dt, 3, 4, lo=-50, hi=50))),
    *_shift("shift_left", lax.shift_left),
    *_shift("shift_right_logical", lax.shift_right_logical),
    *_shift("shift_right_arithmetic", lax.shift_right_arithmetic),
    # weak-typed python scalars keep the array's dtype
    *over("weak_scalar_mul", lambda x: x * 2.5 + 1, FLOATS, lambda dt: args(arr(dt, 3, 4)),
          grad=True),
    Case("weak_scalar_add_i32", lambda x: x + 3 - 1, args(arr(I32, 3, 4))),
    Case("broadcast_binary_f32", lambda x, y: x * y, args(f32(3, 1), f32(1, 4)), grad=True),
]


def _cmp(name, fn):
    cases = over(name, fn, FLOATS + INTS,
                 lambda dt: args(arr(dt, 3, 4, lo=0, hi=3), arr(dt, 3, 4, lo=0, hi=3)))
    cases.append(Case(f"{name}_nan_f32", fn, args(const([NAN, 1.0, NAN, -0.0], F32),
                                                  const([NAN, NAN, 1.0, 0.0], F32))))
    cases.append(Case(f"{name}_bool", fn, args(arr(BOOL, 3, 4), arr(BOOL, 3, 4))))
    return cases


def _total(name, prim):
    special = [0.0, -0.0, NAN, -NAN, INF, -INF, 1.0, -1.0]
    xs = [a for a in special for _ in special]
    ys = [b for _ in special for b in special]
    return [Case(f"{name}_{SHORT[dt]}", lambda x, y: prim.bind(x, y),
                 args(const(xs, dt), const(ys, dt))) for dt in FLOATS] + [
        Case(f"{name}_i32", lambda x, y: prim.bind(x, y), args(arr(I32, 3, 4), arr(I32, 3, 4)))]


# totalOrder comparisons (searchsorted and sort comparators): -NaN < -inf < -0 < +0 < inf < NaN
TOTAL_ORDER_CASES = [*_total("totalorder_lt", lax.lt_to_p), *_total("totalorder_le", lax.le_to_p),
                     *_total("totalorder_eq", lax.eq_to_p),
                     Case("searchsorted_compare_all_f32", lambda a, v: jnp.searchsorted(
                         jnp.sort(a), v, method="compare_all"), args(f32(6), f32(4)))]

COMPARE_CASES = TOTAL_ORDER_CASES + [c for p, fn in [("eq", lax.eq), ("ne", lax.ne), ("lt", lax.lt),
                                 ("le", lax.le), ("gt", lax.gt), ("ge", lax.ge)]
                 for c in _cmp(p, fn)]


def _convert(src, dst, lo=-3, hi=3, special=()):
    return Case(f"convert_{src}_to_{dst}".replace("float", "f").replace("int", "i"),
                lambda x: lax.convert_element_type(x, jnp.dtype(dst)),
                args(arr(src, 3, 5, lo=lo, hi=hi, special=special)))


SELECT_CAST_CASES = [
    *over("select_n", lambda p, x, y: jnp.where(p, x, y), FLOATS + (I32, BOOL),
          lambda dt: args(arr(BOOL, 3, 4), arr(dt, 3, 4), arr(dt, 3, 4))),
    Case("select_n_int_pred_f32", lambda p, x, y, z: lax.select_n(p, x, y, z),
         args(arr(I32, 3, 4, lo=0, hi=2), f32(3, 4), f32(3, 4), f32(3, 4))),
    Case("select_n_grad_f32", lambda x, p: jnp.where(p, x * x, -x), args(f32(3, 4),
                                                                         arr(BOOL, 3, 4)),
         grad=True),
    *over("clamp", lambda x: lax.clamp(jnp.asarray(-1, x.dtype), x, jnp.asarray(1, x.dtype)),
          FLOATS, lambda dt: args(arr(dt, 3, 4)),
          grad=True),
    Case("clamp_arrays_f32", lax.clamp, args(f32(3, 4, hi=-0.5), f32(3, 4), f32(3, 4, lo=0.5))),
    Case("clamp_nan_f32", lambda x: lax.clamp(0.0, x, 1.0), args(const([NAN, 2.0, -1.0, 0.5],
                                                                        F32))),
    Case("clamp_i32", lambda x: lax.clamp(-2, x, 2), args(arr(I32, 3, 4, lo=-5, hi=5))),
    *[_convert(s, d) for s, d in [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32), (F16, BF16),
                                  (I32, F32), (I32, F16), (BOOL, F32), (BOOL, I32), (I32, BOOL),
                                  (I32, U32), (U32, I32)]],
    _convert(F32, I32, lo=-100, hi=100, special=(-2.7, 2.7, -0.5)),
    _convert(F32, U32, lo=0, hi=1000, special=(2.7,)),
    _convert(F32, BOOL, special=(0.0, -0.0, NAN)),
    _convert(U32, F32, lo=0, hi=2 ** 31 - 1),
    Case("convert_grad_f32", lambda x: lax.convert_element_type(x, F16).astype(F32) * x,
         args(f32(3, 4)), grad=True),
    *[Case(f"bitcast_{s}_to_{d}", lambda x, d=d: lax.bitcast_convert_type(x, jnp.dtype(d)),
           args(arr(s, *shape, lo=-1000, hi=1000))) for s, d, shape in [
               (F32, I32, (3, 4)), (I32, F32, (3, 4)), (F32, U32, (3, 4)), (F16, "int16", (3,)),
               (F32, F16, (3,)), (F16, F32, (3, 2)), (BF16, F16, (4,)), (U32, "uint8", (2, 2))]],
    # a scalar to a narrower type (JAX's testBitcastConvertType with shape ())
    *[Case(f"bitcast_scalar_{s}_to_{d}", lambda x, d=d: lax.bitcast_convert_type(x, jnp.dtype(d)),
           args(arr(s, lo=-1000, hi=1000))) for s, d in [(F32, F16), (U32, "uint8")]],
    Case("reduce_precision_f32", lambda x: lax.reduce_precision(x, 5, 10),
         args(f32(3, 4, lo=-1e5, hi=1e5)), grad=True, rtol=1e-6),
    Case("reduce_precision_bf16", lambda x: lax.reduce_precision(x, 4, 3),
         args(arr(BF16, 3, 4)), atol=0, rtol=0),
    # to the operand's own format or a wider one: the identity (remat's saving policies insert
    # the float32 form), folded away by legalization where a backend has no kernel for it
    Case("reduce_precision_identity_f32", lambda x: lax.reduce_precision(x, 8, 23),
         args(f32(3, 4, lo=-1e5, hi=1e5, special=(NAN, INF, -INF, -0.0, 1e-40, 3e38))),
         grad=True, atol=0, rtol=0),
    Case("reduce_precision_identity_f16", lambda x: (lax.reduce_precision(x, 5, 10),
                                                     lax.reduce_precision(x, 8, 23)),
         args(arr(F16, 3, 4, lo=-100, hi=100, special=(NAN, INF, -0.0, 6e-8, 65504.0))),
         atol=0, rtol=0),
]

CASES = UNARY_CASES + BINARY_CASES + COMPARE_CASES + SELECT_CAST_CASES
