"""Op-table cases: convolutions, windowed reductions (pools) and their autodiff companions."""
import jax
import jax.numpy as jnp
from jax import lax

from .op_table_base import BF16, BOOL, F16, F32, I32, Case, arr, args, f32, over


def _conv(name, x_shape, w_shape, dtypes=(F32,), grad=True, scale=1.0, **kw):
    kw.setdefault("window_strides", (1,) * (len(x_shape) - 2))
    kw.setdefault("padding", "VALID")
    return over(name, lambda x, w: lax.conv_general_dilated(x, w, **kw), dtypes,
                lambda dt: args(arr(dt, *x_shape, lo=-1, hi=1), arr(dt, *w_shape, lo=-1, hi=1)),
                grad=grad, scale=scale)


def _grad_w(fn):
    """d(sum fn(x, w))/dw: JAX's weight-gradient convolution."""
    return lambda x, w: jax.grad(lambda w_: jnp.sum(fn(x, w_)))(w)


CONV_CASES = [
    *_conv("conv", (2, 3, 6, 6), (4, 3, 3, 3), dtypes=(F32, F16, BF16), scale=2.0),
    *_conv("conv_stride_pad", (1, 2, 7, 6), (3, 2, 3, 2), window_strides=(2, 1),
           padding=((1, 2), (0, 1))),
    *_conv("conv_same", (1, 2, 5, 5), (2, 2, 3, 3), window_strides=(2, 2), padding="SAME"),
    *_conv("conv_dilated", (1, 2, 5, 6), (2, 2, 2, 3), lhs_dilation=(2, 1),
           rhs_dilation=(1, 2), padding=((1, 1), (2, 0))),
    *_conv("conv_feature_groups", (2, 4, 5, 5), (6, 2, 3, 3), feature_group_count=2),
    *_conv("conv_batch_groups", (4, 3, 5, 5), (4, 3, 2, 2), batch_group_count=2),
    *_conv("conv_nhwc_hwio", (2, 6, 5, 3), (3, 2, 3, 4), padding="SAME",
           dimension_numbers=("NHWC", "HWIO", "NHWC"), dtypes=(F32, F16), scale=2.0),
    *_conv("conv_nhwc_depthwise", (1, 5, 5, 4), (3, 3, 1, 4), feature_group_count=4,
           dimension_numbers=("NHWC", "HWIO", "NHWC")),
    *_conv("conv1d", (2, 3, 9), (4, 3, 3), window_strides=(2,), padding=((2, 1),)),
    *_conv("conv3d", (1, 2, 4, 4, 3), (2, 2, 2, 2, 2)),
    *_conv("conv_pet", (1, 2, 5, 5), (2, 2, 3, 3), dtypes=(BF16,), grad=False,
           preferred_element_type=jnp.float32),
    *_conv("conv_i32", (1, 2, 5, 5), (2, 2, 3, 3), dtypes=(I32,), grad=False),
    Case("conv_grad_weight_f32", _grad_w(lambda x, w: lax.conv_general_dilated(
        x, w, (2, 2), ((1, 0), (1, 1)), rhs_dilation=(1, 2))),
        args(f32(2, 3, 7, 8), f32(4, 3, 3, 2))),
]


def _pool(name, init, op, dtypes, grad=True, **kw):
    kw.setdefault("window_dimensions", (1, 1, 2, 2))
    kw.setdefault("window_strides", (1, 1, 2, 2))
    kw.setdefault("padding", "VALID")
    return over(name, lambda x: lax.reduce_window(x, init, op, **kw), dtypes,
                lambda dt: args(arr(dt, 2, 2, 5, 6, lo=-4, hi=4)), grad=grad)


def _avg(x):
    """Average pool with padding, counting only real elements (as flax does)."""
    win, strides, pad = (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))
    s = lax.reduce_window(x, 0.0, lax.add, win, strides, pad)
    n = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, win, strides, pad)
    return s / n


_OVERLAP = dict(window_dimensions=(1, 1, 3, 3), window_strides=(1, 1, 2, 1),
                padding=((0, 0), (0, 0), (1, 1), (0, 1)))
_DILATED = dict(window_dimensions=(1, 1, 2, 2), window_strides=(1, 1, 1, 1),
                padding=((0, 0), (0, 0), (1, 0), (0, 1)), base_dilation=(1, 1, 2, 1),
                window_dilation=(1, 1, 1, 2))


def _max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 1),
                             ((0, 0), (0, 0), (1, 1), (0, 1)))


def _add_max(x, y):
    """Two operands reduced together: a sum and a max (as lax_test's testReduceWindowVariadic)."""
    return lax.reduce_window((x, y), (0.0, -jnp.inf), lambda a, b: (a[0] + b[0], lax.max(
        a[1], b[1])), (1, 1, 3, 2), (1, 1, 1, 2), "SAME", (1, 1, 2, 1), (1, 1, 1, 2))


def _mul_add(x):
    return lax.reduce_window(x, 1.0, lambda a, b: a * b + a, (1, 1, 2, 3), (1, 1, 1, 2), "SAME")


POOL_CASES = [
    *_pool("reduce_window_sum", 0.0, lax.add, (F32, F16, BF16)),
    *_pool("reduce_window_sum_i32", 0, lax.add, (I32,), grad=False),
    *_pool("reduce_window_sum_padded", 0.0, lax.add, (F32,), **_OVERLAP),
    Case("avg_pool_padded_f32", _avg, args(f32(2, 2, 5, 6)), grad=True),
    *_pool("reduce_window_max", -jnp.inf, lax.max, (F32, F16, BF16)),
    *_pool("reduce_window_max_padded", -jnp.inf, lax.max, (F32,), **_OVERLAP),
    # (JAX has no VJP for a max pool with window dilation)
    *_pool("reduce_window_max_dilated", -jnp.inf, lax.max, (F32,), grad=False, **_DILATED),
    *_pool("reduce_window_max_i32", jnp.iinfo(jnp.int32).min, lax.max, (I32,), grad=False),
    *_pool("reduce_window_min", jnp.inf, lax.min, (F32, F16)),
    *_pool("reduce_window_min_padded", jnp.inf, lax.min, (F32,), **_OVERLAP),
    # a non-identity init value makes JAX emit the generic reduce_window (no VJP in JAX)
    *_pool("reduce_window_init", 1.0, lax.add, (F32,), grad=False),
    *_pool("reduce_window_init_padded", 1.0, lax.add, (F32,), grad=False, **_OVERLAP),
    *_pool("reduce_window_init_dilated", 0.5, lax.add, (F32,), grad=False, **_DILATED),
    *_pool("reduce_window_init_max", 0.0, lax.max, (F32,), grad=False, **_OVERLAP),
    *_pool("reduce_window_init_min", 0.25, lax.min, (F32,), grad=False, **_OVERLAP),
    # general bodies (XLA leaves the order of a non-associative body open: these bodies give
    # one result in any order): a fold over the window elements, padding and holes skipped
    *_pool("reduce_window_body_muladd", 1.0, lambda a, b: a * b + a, (F32,), grad=False,
           **_OVERLAP),
    *_pool("reduce_window_body_sub", 0.5, lambda a, b: a - b, (F32,), grad=False, **_DILATED),
    *_pool("reduce_window_body_squares", 1, lambda a, b: a + b * b, (I32,), **_OVERLAP),
    *_pool("reduce_window_body_or", False, lax.bitwise_or, (BOOL,), **_OVERLAP),
    Case("reduce_window_variadic_f32", _add_max, args(f32(2, 2, 5, 6), f32(2, 2, 5, 6))),
    Case("reduce_window_body_jvp_f32", lambda x, t: jax.jvp(_mul_add, (x,), (t,)),
         args(f32(2, 2, 5, 6), f32(2, 2, 5, 6))),
    # max-pool backward and forward-mode tangent
    Case("select_and_scatter_add_f32", jax.grad(lambda x: jnp.sum(_max_pool(x) ** 2)),
         args(f32(2, 2, 5, 6))),
    Case("select_and_gather_add_f32",
         lambda x, t: jax.jvp(_max_pool, (x,), (t,))[1], args(f32(2, 2, 5, 6), f32(2, 2, 5, 6))),
]

CASES = CONV_CASES + POOL_CASES
