"""Edge values every backend must treat as JAX does: NaN through scatter max/min and the
cumulative ops, infinities through log1p/expm1/asinh/acosh/atan2/cumlogsumexp, signed zeros
through sign/cbrt, and lax.pad of bools that crops the operand away. The oracle is `jax.jit`
on CPU."""
import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import rlx_jax

from .divergences import skip_dtype

pytestmark = pytest.mark.extended   # the 'extended tests' CI step (pyproject.toml)

BF16 = np.dtype(ml_dtypes.bfloat16)


def _runs(backend):
    """(backend, options) pairs: MLX both compiled and eager."""
    return [{}, {"compile": False}] if backend == "mlx" else [{}]


def _assert_same(got, want, rtol=0.0):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{got} vs {want}")
    fin = np.isfinite(w)
    np.testing.assert_array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)])
    np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=rtol)
    zero = fin & (w == 0)
    np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                  err_msg=f"signed zeros: {got} vs {want}")


def _check(backend, f, *args, rtol=0.0):
    want = jax.jit(f)(*args)
    for opts in _runs(backend):
        _assert_same(rlx_jax.jit(f, backend=backend, **opts)(*args), want, rtol)


# ---- scatter max / min: a NaN in the operand or in any update wins
SCATTER_CASES = {
    "nan_in_operand": ([np.nan, 1, 2], [0], [5.0]),
    "nan_update": ([3, 1, 2], [0], [np.nan]),
    "nan_update_then_number": ([3, 1, 2], [0, 0, 1], [np.nan, 4, -np.inf]),
    "nan_both": ([np.nan, 1, 2], [0, 0, 1], [np.nan, 4, np.nan]),
    "infinities": ([-np.inf, np.inf, 2], [0, 1, 1], [np.inf, -np.inf, 7]),
}


@pytest.mark.parametrize("method", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", list(SCATTER_CASES))
def test_scatter_max_min_nan(backend, method, dtype, case):
    x, i, u = SCATTER_CASES[case]

    def f(x, i, u):
        return getattr(x.at[i], method)(u)
    _check(backend, f, np.array(x, dtype), np.array(i, np.int32), np.array(u, dtype))


@pytest.mark.parametrize("method", ["max", "min"])
def test_scatter_max_min_int(backend, method):
    def f(x, i, u):
        return getattr(x.at[i], method)(u)
    _check(backend, f, np.array([3, 1, 2], np.int32), np.array([0, 0, 2], np.int32),
           np.array([7, -9, 1], np.int32))


# ---- cumulative ops: NaN propagates, infinities combine as in JAX
CUM = {"cummax": lax.cummax, "cummin": lax.cummin, "cumsum": lax.cumsum,
       "cumprod": lax.cumprod, "cumlogsumexp": lax.cumlogsumexp}
CUM_VALUES = {"nan": [3, np.nan, 1, np.inf, -np.inf, 2],
              "infinities": [3, -np.inf, 1, np.inf, 0.5, 2],
              "repeated_infinities": [-np.inf, -np.inf, 1, np.inf, np.inf, 2]}


@pytest.mark.parametrize("name", list(CUM))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("values", list(CUM_VALUES))
def test_cumulative_nan_inf(backend, name, dtype, reverse, values):
    skip_dtype(backend, dtype)
    x = np.array(CUM_VALUES[values]).astype(dtype)
    rtol = 1e-2 if np.dtype(dtype).itemsize == 2 else 1e-5
    _check(backend, lambda x: CUM[name](x, axis=0, reverse=reverse), x, rtol=rtol)


# ---- transcendental edge values
EDGES = [np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, 1.0, -2.0, 0.5, 100.0, -100.0, 1e-3, 300.0]
UNARY = {"log1p": jnp.log1p, "expm1": jnp.expm1, "log": jnp.log, "exp": jnp.exp,
         "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
         "erf": lax.erf, "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh,
         "sign": jnp.sign, "cbrt": jnp.cbrt, "atan": jnp.arctan}


# known signed-zero divergences (backend, op) -> reason; everything else must match (MLX's
# erf(+0.0) = -0.0 is corrected by the rule: tests/test_regressions_mlx.py)
KNOWN = {}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_unary_edge_values(backend, name, dtype, request):
    if (backend, name) in KNOWN:
        request.applymarker(pytest.mark.xfail(reason=KNOWN[backend, name], strict=True))
    x = np.array(EDGES, dtype)
    _check(backend, UNARY[name], x, rtol=2e-3 if dtype == np.float16 else 2e-5)


SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_atan2_edge_table(backend, dtype):
    y, x = (np.array(v, dtype) for v in zip(*itertools.product(SPECIAL, SPECIAL)))
    _check(backend, jnp.arctan2, y, x, rtol=2e-3 if dtype == np.float16 else 2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_atan2_broadcast_edges(backend, dtype):
    y = np.array([[np.inf], [-np.inf], [1.0]], dtype)
    x = np.array([np.inf, -np.inf, -0.0, 2.0], dtype)
    _check(backend, jnp.arctan2, y, x, rtol=2e-3 if dtype == np.float16 else 2e-6)


# ---- lax.pad that crops the whole operand away
PAD_CONFIG = ((2, -1, 1), (0, 0, 0), (1, 0, 1), (1, 1, 0))


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.float32])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 1, 2, 1)])
@pytest.mark.parametrize("runtime_value", [False, True])
def test_pad_cropping_the_operand_away(backend, dtype, shape, runtime_value):
    x = (np.arange(np.prod(shape)).reshape(shape) % 2).astype(dtype)
    if runtime_value:
        _check(backend, lambda x, v: lax.pad(x, v, PAD_CONFIG), x, np.ones((), dtype))
    else:
        _check(backend, lambda x: lax.pad(x, np.zeros((), dtype), PAD_CONFIG), x)


# ---- windowed reductions whose first window lies entirely in the padding
WINDOW_CASES = {
    "max_f32": ("max", np.float32, (3, 2), (3, 1), (2, 1), ((1, 0), (2, 1)), None),
    "min_dilated_f32": ("min", np.float32, (4, 2, 1), (2, 3, 2), (1, 1, 1),
                        ((2, 1), (2, 2), (1, 0)), (2, 1, 1)),
    "sum_i32": ("sum", np.int32, (3, 2, 2), (1, 2, 2), (2, 2, 2), ((1, 0), (0, 0), (0, 2)), None),
    "sum_f16": ("sum", np.float16, (3, 2, 2), (1, 2, 2), (2, 2, 2), ((1, 0), (0, 0), (0, 2)),
                None),
}
COMBINE = {"max": (lax.max, -np.inf), "min": (lax.min, np.inf), "sum": (lax.add, 0)}


@pytest.mark.parametrize("case", list(WINDOW_CASES))
def test_reduce_window_over_padding_only(backend, case):
    fn, dtype, shape, window, strides, padding, dilation = WINDOW_CASES[case]
    combine, init = COMBINE[fn]
    if dtype == np.int32 and fn != "sum":
        init = np.iinfo(np.int32).min if fn == "max" else np.iinfo(np.int32).max
    x = np.random.default_rng(0).uniform(-3, 3, shape).astype(dtype)

    def f(x):
        return lax.reduce_window(x, jnp.array(init, x.dtype), combine, window, strides, padding,
                                 window_dilation=dilation)
    _check(backend, f, x, rtol=1e-2 if dtype == np.float16 else 1e-6)


# ---- conv kernel gradients with input dilation, strides and uneven padding
CONV_GRAD_CASES = [  # x (NHWC), w (HWIO), lhs_dilation, strides, padding
    ((1, 1, 2, 1), (1, 3, 1, 1), (1, 2), (2, 2), ((0, 2), (1, 0))),
    ((1, 1, 2, 1), (1, 3, 1, 1), (2, 2), (1, 3), ((0, 2), (1, 0))),
    ((1, 2, 2, 1), (3, 3, 1, 1), (1, 2), (2, 2), ((0, 2), (1, 0))),
    ((1, 3, 3, 2), (2, 2, 2, 1), (1, 2), (1, 3), ((0, 2), (1, 0))),
    ((1, 2, 2, 1), (3, 3, 1, 1), (2, 2), (2, 2), ((0, 2), (1, 0))),
]


@pytest.mark.parametrize("case", range(len(CONV_GRAD_CASES)))
def test_conv_gradients_with_input_dilation(backend, case):
    """MLX's own conv VJP gave these kernel gradients the wrong shape."""
    xs, ws, lhs_dilation, strides, padding = CONV_GRAD_CASES[case]

    def f(x, w):
        y = lax.conv_general_dilated(x, w, strides, padding, lhs_dilation=lhs_dilation,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(y ** 2)
    rng = np.random.default_rng(case)
    x, w = rng.normal(size=xs).astype(np.float32), rng.normal(size=ws).astype(np.float32)
    want = jax.jit(jax.grad(f, argnums=(0, 1)))(x, w)
    for opts in _runs(backend):
        got = rlx_jax.jit(jax.grad(f, argnums=(0, 1)), backend=backend, **opts)(x, w)
        for g, v in zip(got, want):
            assert g.shape == v.shape
            np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-5, atol=1e-5)
