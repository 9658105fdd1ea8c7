"""Every MLX rule against JAX itself, case by case: integer division and shifts, NaN handling,
casts, gather/scatter dimension numbers and modes, convolutions, windows, sorting.
Complements the shared op table with the corner cases of each rule."""
import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import rlx_jax

from .cases import Case

pytestmark = pytest.mark.skipif("mlx" not in rlx_jax.available_backends(),
                                reason="mlx is not installed")

R = np.random.RandomState(0)
NAN = np.float32(np.nan)


def u(*shape, lo=-3.0, hi=3.0, dtype=np.float32):
    return R.uniform(lo, hi, shape).astype(dtype)


def i(*shape, lo=-9, hi=9, dtype=np.int32):
    return R.randint(lo, hi + 1, shape).astype(dtype)


SPECIAL = np.array([0.0, -0.0, 1.5, -1.5, 2.5, -2.5, 0.5, -0.5, np.inf, -np.inf, np.nan, 3e9,
                    -3e9, 1e-30, 7.0, -7.0], np.float32)
INTS = np.array([7, -7, 7, -7, 0, 5, -2147483648, -2147483648, 13, 1], np.int32)
DIVS = np.array([2, 2, -2, -2, 3, 0, -1, 3, -5, 1], np.int32)
SHIFTS = np.array([0, 1, 31, 32, 33, -1, 5, 40, 3, 100], np.int32)

RULE_CASES = {     # name -> (function, arguments); the arguments are drawn once, at import
    # elementwise unary
    **{f"unary_{n}": (f, (u(4, 5),)) for n, f in {
        "exp": jnp.exp, "exp2": jnp.exp2, "log": lambda x: jnp.log(jnp.abs(x) + 0.1),
        "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "asin": lambda x: jnp.arcsin(x / 3),
        "acosh": lambda x: jnp.arccosh(jnp.abs(x) + 1), "atanh": lambda x: jnp.arctanh(x / 4),
        "cbrt": lax.cbrt, "erf": lax.erf, "erfc": lax.erfc, "erf_inv": lambda x: lax.erf_inv(x / 3.1),
        "lgamma": lax.lgamma, "digamma": lax.digamma, "rsqrt": lambda x: lax.rsqrt(jnp.abs(x) + .1),
        "gelu": lambda x: jax.nn.gelu(x, approximate=False), "gelu_tanh": jax.nn.gelu,
        "silu": jax.nn.silu, "log1p": lambda x: jnp.log1p(jnp.abs(x)), "expm1": jnp.expm1,
        "integer_pow3": lambda x: lax.integer_pow(x, 3), "integer_pow_m2": lambda x: lax.integer_pow(x, -2),
        "tan": jnp.tan, "sinh": jnp.sinh, "atan": jnp.arctan,
    }.items()},
    "lgamma_wide": (lax.lgamma, (np.array([0.1, 0.5, 1.0, 2.0, 3.3, 10.0, 55.5, -0.5, -1.5, -2.2,
                                           -7.7, 1e-3], np.float32),)),
    "digamma_wide": (lax.digamma, (np.array([0.1, 0.5, 1.0, 2.0, 3.3, 10.0, 55.5, -0.5, -1.5,
                                             -2.2, -7.7, 1e-3], np.float32),)),
    "erfc_wide": (lax.erfc, (np.linspace(-5, 9, 57).astype(np.float32),)),
    "special_unary": (lambda x: (jnp.sign(x), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                                 jnp.round(x), jnp.floor(x), jnp.isfinite(x), jnp.abs(x)),
                      (SPECIAL,)),
    "popcount": (lambda x, y: (lax.population_count(x), lax.population_count(y)),
                 (INTS, np.array([0, 1, 255, 128, 7], np.uint8))),
    "not": (lambda x, b: (~x, ~b), (INTS, np.array([True, False]))),
    # binary
    "int_div_rem": (lambda x, y: (lax.div(x, y), lax.rem(x, y)), (INTS, DIVS)),
    "int8_div_rem": (lambda x, y: (lax.div(x, y), lax.rem(x, y)),
                     (INTS.astype(np.int8), DIVS.astype(np.int8))),
    "uint_div_rem": (lambda x, y: (lax.div(x, y), lax.rem(x, y)),
                     (np.array([7, 9, 0, 255], np.uint8), np.array([2, 0, 3, 16], np.uint8))),
    "float_rem": (lax.rem, (np.array([7.5, -7.5, 7.5, -7.5, 1.0], np.float32),
                            np.array([2, 2, -2, -2, 0.0], np.float32))),
    "shifts": (lambda x, s: (lax.shift_left(x, s), lax.shift_right_logical(x, s),
                             lax.shift_right_arithmetic(x, s)), (INTS, SHIFTS)),
    "shifts_u8": (lambda x, s: (lax.shift_left(x, s), lax.shift_right_logical(x, s),
                                lax.shift_right_arithmetic(x, s)),
                  (np.array([1, 255, 128, 3], np.uint8), np.array([1, 8, 7, 200], np.uint8))),
    "max_min_nan": (lambda x, y: (lax.max(x, y), lax.min(x, y)),
                    (np.array([NAN, 1, 2, -0.0], np.float32), np.array([1, NAN, 3, 0.0], np.float32))),
    "pow_int_exponent": (lambda x, y: lax.pow(x, y), (u(6), np.array([3, 3, -2, -3, -1, 0], np.int32))),
    "float_pow": (lax.pow, (u(6, lo=0.1), u(6))),
    "atan2": (lax.atan2, (u(5), u(5))),
    "nextafter": (lax.nextafter, (np.array([1.0, 1.0, 0.0, 0.0, -1.0, 2.0, NAN], np.float32),
                                  np.array([2.0, 0.0, 1.0, -1.0, -2.0, 2.0, 1.0], np.float32))),
    "bitwise": (lambda x, y: (x & y, x | y, x ^ y), (INTS, DIVS)),
    "bool_ops": (lambda x, y: (x & y, x | y, x ^ y, lax.max(x, y), lax.min(x, y)),
                 (np.array([True, True, False, False]), np.array([True, False, True, False]))),
    "wrap_int8": (lambda x, y: (x + y, x * y, x - y), (i(6, lo=-128, hi=127, dtype=np.int8),
                                                      i(6, lo=-128, hi=127, dtype=np.int8))),
    "compare_nan": (lambda x, y: (x < y, x <= y, x == y, x != y, x > y, x >= y),
                    (np.array([NAN, 1, 2, 0.0], np.float32), np.array([1, NAN, 2, -0.0], np.float32))),
    # casts
    "cast_f2i": (lambda x: (x.astype(jnp.int32), x.astype(jnp.uint8), x.astype(jnp.int8),
                            x.astype(jnp.bool_), x.astype(jnp.uint32), x.astype(jnp.int16)),
                 (SPECIAL,)),
    "cast_i2x": (lambda x: (x.astype(jnp.float16), x.astype(jnp.uint8), x.astype(jnp.bool_),
                            x.astype(jnp.bfloat16)), (INTS,)),
    "bitcast": (lambda x: (lax.bitcast_convert_type(x, jnp.int32),
                           lax.bitcast_convert_type(x, jnp.uint8),
                           lax.bitcast_convert_type(x.astype(jnp.float16), jnp.int16)), (u(3, 2),)),
    "bitcast_widen": (lambda x: lax.bitcast_convert_type(x, jnp.float32), (i(3, 4, dtype=np.uint8),)),
    "reduce_precision": (lambda x: (lax.reduce_precision(x, 5, 10), lax.reduce_precision(x, 8, 7),
                                    lax.reduce_precision(x, 4, 3)), (np.concatenate([SPECIAL, u(20, lo=-1e5, hi=1e5)]),)),
    # reductions
    "reduce_all": (lambda x: (x.sum((0, 2)), x.max(1), x.min(), jnp.prod(x, 0)), (u(3, 4, 2),)),
    "reduce_nan": (lambda x: (x.max(1), x.min(1), x.sum(1)), (np.array([[1, NAN, 2], [3, 1, 2]], np.float32),)),
    "reduce_int": (lambda x: (x.sum(1), x.max(1), jnp.prod(x, 1)), (i(3, 5, dtype=np.int8),)),
    "reduce_bits": (lambda x, b: (lax.reduce_and(x, (1,)), lax.reduce_or(x, (1,)),
                                  lax.reduce_xor(x, (1,)), b.all(1), b.any(1),
                                  lax.reduce_xor(b, (1,))),
                    (i(3, 5, lo=-50, hi=50), R.rand(3, 5) > 0.5)),
    "argmax_nan_ties": (lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 1), jnp.argmax(x, 0)),
                        (np.array([[1, 3, 3, NAN, 2, NAN], [5, 5, 1, 1, 0, 5]], np.float32),)),
    "argmax_int": (lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 0)), (i(4, 6, lo=0, hi=2),)),
    "cumulative": (lambda x: (jnp.cumsum(x, 1), lax.cumsum(x, 0, reverse=True), jnp.cumprod(x, 1),
                              lax.cummax(x, 1), lax.cummin(x, 1, reverse=True),
                              lax.cumlogsumexp(x, 1)), (u(3, 5),)),
    "cumsum_int8": (lambda x: (jnp.cumsum(x, 1, dtype=jnp.int8), lax.cummax(x, 0)),
                    (i(3, 5, dtype=np.int8, lo=-100, hi=100),)),
    "sort": (lambda x: (jnp.sort(x), jnp.sort(x, axis=0), jnp.argsort(x, stable=True)),
             (np.array([[3, NAN, -0.0, 0.0, -np.inf, 1, 3, -NAN]] * 2, np.float32),)),
    "sort_multi": (lambda k, v: lax.sort((k, v), num_keys=1), (i(3, 8, lo=0, hi=2), u(3, 8))),
    "sort_two_keys": (lambda k1, k2, v: lax.sort((k1, k2, v), num_keys=2, dimension=0),
                      (i(9, 2, lo=0, hi=1), i(9, 2, lo=0, hi=2), i(9, 2))),
    "top_k": (lambda x: lax.top_k(x, 3), (np.array([[1, 3, 3, 2, 3, NAN], [0, 0, 0, 1, -1, 0]], np.float32),)),
    "top_k_int": (lambda x: lax.top_k(x, 4), (i(3, 6, lo=-2, hi=2),)),
    # contractions
    "dot_general_batch": (lambda x, y: lax.dot_general(x, y, (((3, 1), (0, 2)), ((0,), (1,)))),
                          (u(2, 3, 4, 5), u(5, 2, 3, 6))),
    "dot_int": (lambda x, y: x @ y, (i(3, 4), i(4, 2))),
    "dot_int8_pet": (lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32),
                     (i(3, 4, dtype=np.int8), i(4, 2, dtype=np.int8))),
    "dot_bf16_pet": (lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32),
                     (u(3, 4).astype(jnp.bfloat16), u(4, 2).astype(jnp.bfloat16))),
    "matmul_bcast": (jnp.matmul, (u(2, 3, 4), u(4, 5))),
    # shapes
    "pad": (lambda x: (lax.pad(x, 9.0, ((1, 2, 1), (-1, 0, 2))), lax.pad(x, 0.0, ((-2, -1, 0), (0, 0, 0)))),
            (u(4, 3),)),
    "slices": (lambda x: (x[1:3, ::2], x[::-1, 1], lax.slice(x, (0, 1), (4, 3), (3, 1)),
                          jnp.flip(x, (0, 1))), (u(4, 3),)),
    "dynamic_slice": (lambda x, a, b: (lax.dynamic_slice(x, (a, b), (2, 2)),
                                       lax.dynamic_update_slice(x, jnp.ones((2, 2)), (a, b)),
                                       lax.dynamic_slice(x, (b, a), (3, 1))),
                      (u(4, 3), np.int32(3), np.int32(-5))),
    "iota_expand": (lambda x: (lax.broadcasted_iota(jnp.int32, (3, 4), 1) + x,
                               jnp.broadcast_to(x[:, None], (3, 5, 4))), (i(3, 4),)),
    # gather / scatter
    "take_modes": (lambda x, idx: (jnp.take(x, idx, axis=0, mode="clip"),
                                   jnp.take(x, idx, axis=1, mode="fill"),
                                   x.at[jnp.clip(idx, 0, 3)].get(mode="promise_in_bounds"),
                                   jnp.take(x, idx, axis=0, mode="fill", fill_value=-1.0)),
                   (u(4, 5), np.array([0, 3, -1, 7, 2], np.int32))),
    "gather_2d_idx": (lambda x, idx: x[idx[:, 0], :, idx[:, 1]], (u(4, 3, 5), np.array([[0, 1], [3, 4], [2, 2]], np.int32))),
    "take_along": (lambda x, idx: jnp.take_along_axis(x, idx, axis=1), (u(3, 5), i(3, 4, lo=0, hi=4))),
    "gather_batching": (lambda x, idx: jax.vmap(lambda a, j: a[j])(x, idx), (u(3, 5, 2), i(3, 4, lo=0, hi=4))),
    "scatter_modes": (lambda x, idx, v: (x.at[idx].add(v), x.at[idx].set(v), x.at[idx].mul(v),
                                         x.at[idx].min(v), x.at[idx].max(v),
                                         x.at[idx].add(v, mode="clip"), x.at[idx].set(v, mode="drop")),
                      (u(5, 3), np.array([0, 4, 9, -1, 2], np.int32), u(5, 3))),
    "scatter_dup_add": (lambda x, idx, v: x.at[idx].add(v), (u(4), np.array([1, 1, 3, 1], np.int32), u(4))),
    "scatter_2d": (lambda x, v: x.at[1:3, ::2].add(v), (u(4, 5), u(2, 3))),
    "scatter_batching": (lambda x, idx, v: jax.vmap(lambda a, j, w: a.at[j].add(w))(x, idx, v),
                         (u(3, 5), i(3, 4, lo=0, hi=4), u(3, 4))),
    # convolutions and windows
    "conv_nchw": (lambda x, w: lax.conv_general_dilated(x, w, (2, 1), ((1, 2), (0, 1)), (1, 1), (1, 2)),
                  (u(2, 3, 9, 8), u(4, 3, 3, 2))),
    "conv_nhwc_groups": (lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2),
        (u(2, 6, 5, 4), u(3, 3, 2, 6))),
    "conv_lhs_dil_negpad": (lambda x, w: lax.conv_general_dilated(x, w, (1,), ((-1, 2),), (2,), (1,)),
                            (u(1, 2, 7), u(3, 2, 3))),
    "conv_batch_group": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                                               batch_group_count=2),
                         (u(4, 2, 5, 5), u(6, 2, 2, 2))),
    "conv1d_3d": (lambda x, w, y, v: (lax.conv(x, w, (1,), "SAME"), lax.conv(y, v, (1, 2, 1), "VALID")),
                  (u(2, 3, 8), u(4, 3, 3), u(1, 2, 4, 5, 4), u(3, 2, 2, 2, 2))),
    "conv_int": (lambda x, w: (lax.conv_general_dilated(x, w, (2, 1), ((1, -1), (2, 0)), (1, 2), (2, 1),
                                                        feature_group_count=2),
                               lax.conv_general_dilated(x.astype(jnp.int8), w.astype(jnp.int8), (1, 1),
                                                        "SAME", feature_group_count=2)),
                 (i(2, 4, 7, 6, lo=-100, hi=100), i(4, 2, 3, 2, lo=-100, hi=100))),
    "conv_4_spatial_dims": (lambda x, w: lax.conv(x, w, (1, 2, 1, 1), "SAME"),
                            (u(1, 2, 3, 4, 3, 3), u(2, 2, 2, 2, 1, 2))),
    "pools": (lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME"),
                         lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 1, 1),
                                           ((0, 0), (0, 0), (1, 0), (0, 1))),
                         lax.reduce_window(x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 2, 1),
                                           "VALID", window_dilation=(1, 1, 2, 1)),
                         lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 1, 1), "VALID",
                                           base_dilation=(1, 1, 2, 1))),
              (u(2, 3, 7, 6),)),
    "maxpool_grad": (jax.grad(lambda x: jnp.sum(lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2)),
        (np.round(u(2, 7, 6, 3)),)),
    "maxpool_jvp": (lambda x, t: jax.jvp(lambda a: lax.reduce_window(
        a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), (x,), (t,)),
        (np.round(u(2, 6, 6, 3)), u(2, 6, 6, 3))),
    "conv_grads": (jax.grad(lambda x, w: jnp.sum(lax.conv_general_dilated(
        x, w, (2, 2), "SAME", feature_group_count=1) ** 2), argnums=(0, 1)),
        (u(2, 3, 7, 7), u(4, 3, 3, 3))),
    "conv_grouped_grads": (jax.grad(lambda x, w: jnp.sum(lax.conv_general_dilated(
        x, w, (1, 1), "SAME", feature_group_count=2) ** 2), argnums=(0, 1)),
        (u(2, 4, 5, 5), u(6, 2, 3, 3))),
    # dtypes
    "half_types": (lambda x, y: (x * 2 + jnp.exp(x), jnp.tanh(y) @ y.T, x.sum()),
                   (u(3, 4).astype(np.float16), u(3, 4).astype(ml_dtypes.bfloat16))),
    "uint64_int64": (lambda x, y: (x + 3, y * y, x >> 3), (i(5, lo=0, hi=90, dtype=np.uint64),
                                                         i(5, dtype=np.int64))),
}
TOL = {"half_types": 1e-2, "dot_bf16_pet": 1e-2, "conv_grads": 1e-4, "conv_grouped_grads": 1e-4,
       "lgamma_wide": 2e-5, "digamma_wide": 5e-5, "erfc_wide": 1e-6}
# as case records: a fixed argument tuple, the tolerance as both atol and rtol
CASES = {name: Case(name, fn, args=lambda r, a=a: a, atol=TOL.get(name, 1e-5),
                    rtol=TOL.get(name, 1e-5)) for name, (fn, a) in RULE_CASES.items()}


def _check(got, want, name, atol, rtol):
    got = np.asarray(got) if not hasattr(got, "view") or isinstance(got, np.ndarray) else got
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=name)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule(name):
    case = CASES[name]
    fn, args = case.fn, case.args(None)
    x64 = any(np.asarray(a).dtype.itemsize == 8 for a in args)
    with jax.enable_x64(x64) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64(x64):
        want = jax.jit(fn)(*args)
        got = rlx_jax.jit(fn, backend="mlx", output="numpy")(*args)
    jax.tree.map(functools.partial(_check, name=name, atol=case.atol, rtol=case.rtol), got, want)
