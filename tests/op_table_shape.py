"""Op-table cases: shape and data movement, iota, identities and AD-only primitives."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import core as _core
from jax._src.lax import lax as _lax_internal

from .op_table_base import (BF16, BOOL, F16, F32, FLOATS, I32, U32, Case, args, arr, f32, over)

ALL = FLOATS + (I32, U32, BOOL)


def _shape(name, fn, shape, dtypes=ALL, grad=True):
    return over(name, fn, dtypes, lambda dt: args(arr(dt, *shape, lo=-5, hi=5)), grad=grad)


def _unordered_dims_allowed():
    """JAX >= 0.10 takes broadcast_in_dim dimensions in any order; 0.9 (the oldest supported
    JAX) refuses them, so the case exists only where JAX itself runs it."""
    try:
        jax.eval_shape(lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 0)),
                       jax.ShapeDtypeStruct((3, 1), np.float32))
        return True
    except TypeError:
        return False


def _empty2_plus(x):
    """empty2 (an uninitialised scalar that AD of cond/scan emits) bound directly; JAX's CPU
    lowering and rlx_jax both materialise it as zero."""
    e = _lax_internal.empty2(x.dtype, memory_space=_core.MemorySpace.Device)
    return x + e


SHAPE_CASES = [
    *_shape("broadcast_in_dim", lambda x: jnp.broadcast_to(x, (2, 3, 4)), (3, 1)),
    Case("broadcast_in_dim_dims_f32", lambda x: lax.broadcast_in_dim(x, (3, 2, 4), (0, 2)),
         args(f32(3, 4)), grad=True),
    *(_shape("broadcast_in_dim_unordered_dims",     # JAX's testBroadcastInDim: dims (1, 0)
             lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 0)), (3, 1), dtypes=(F32, F16, I32))
      if _unordered_dims_allowed() else ()),
    *_shape("expand_dims", lambda x: jnp.expand_dims(x, (0, 2)), (3, 4), dtypes=(F32, I32)),
    *_shape("reshape", lambda x: x.reshape(4, 6), (2, 3, 4), dtypes=(F32, F16, I32, BOOL)),
    Case("reshape_scalar_f32", lambda x: x.reshape(()), args(f32(1, 1)), grad=True),
    *_shape("transpose", lambda x: jnp.transpose(x, (2, 0, 1)), (2, 3, 4)),
    *_shape("squeeze", lambda x: lax.squeeze(x, (0, 2)), (1, 3, 1, 4), dtypes=(F32, I32)),
    *_shape("rev", lambda x: jnp.flip(x, (0, 2)), (2, 3, 4), dtypes=(F32, F16, I32, BOOL)),
    *over("concatenate", lambda x, y, z: jnp.concatenate([x, y, z], axis=1), ALL,
          lambda dt: args(arr(dt, 2, 1), arr(dt, 2, 3), arr(dt, 2, 2)), grad=True),
    *over("pad", lambda x, v: lax.pad(x, v, [(1, 2, 0), (0, 1, 1)]), ALL,
          lambda dt: args(arr(dt, 3, 4), arr(dt)), grad=True),
    Case("pad_negative_interior_f32", lambda x: lax.pad(x, -7.0, [(-1, 2, 2), (2, -2, 0)]),
         args(f32(3, 5)), grad=True),
    Case("jnp_pad_modes_f32", lambda x: (jnp.pad(x, 2, mode="edge"),
                                         jnp.pad(x, ((1, 1), (2, 0)), mode="reflect")),
         args(f32(3, 4))),
    *_shape("tile", lambda x: jnp.tile(x, (2, 3)), (2, 3), dtypes=(F32, I32, BOOL)),
    Case("tile_more_reps_f32", lambda x: jnp.tile(x, (2, 1, 2)), args(f32(3, 2)), grad=True),
    *_shape("slice", lambda x: lax.slice(x, (1, 0), (4, 5), (2, 2)), (5, 6)),
    Case("slice_basic_f32", lambda x: x[1:3, ::-1][:, 1:], args(f32(4, 5)), grad=True),
    *_shape("split", lambda x: jnp.split(x, [1, 4], axis=1), (3, 6), dtypes=(F32, I32)),
    *_shape("stack", lambda x: jnp.stack([x, 2 * x, x], axis=1), (3, 4), dtypes=(F32, I32)),
    *_shape("unstack", lambda x: jnp.unstack(x, axis=1), (3, 4), dtypes=(F32, I32)),
    Case("iota_i32", lambda: lax.iota(jnp.int32, 6), args()),
    # a float iota past the integers its type holds (float16 above 2,048, bfloat16 above 256)
    # is the rounded integer iota, as XLA's; counting in the float type stalls there
    *over("iota_long", lambda x: x + lax.iota(x.dtype, 5000), (F16, BF16, F32),
          lambda dt: args(arr(dt))),
    *over("iota_broadcasted", lambda x: x + lax.broadcasted_iota(x.dtype, (3, 4), 1),
          (F32, F16, I32, U32), lambda dt: args(arr(dt, 3, 4, lo=0))),
    Case("arange_f32", lambda x: x * jnp.arange(4, dtype=jnp.float32), args(f32(4))),
    *_shape("copy", lambda x: jnp.copy(x) * 2, (3, 4), dtypes=(F32, I32)),
    Case("device_put_f32", lambda x: jax.device_put(x) * 2, args(f32(3, 4)), grad=True),
    Case("sharding_constraint_f32", lambda x: lax.with_sharding_constraint(
        x, jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])) + 1, args(f32(3, 4))),
    Case("stop_gradient_f32", lambda x: x * lax.stop_gradient(x), args(f32(3, 4)), grad=True),
    Case("stop_gradient_i32", lambda x: lax.stop_gradient(x) + 1, args(arr(I32, 3, 4))),
    # add_any only appears in differentiated programs: a value used twice
    Case("add_any_f32", jax.grad(lambda x: jnp.sum(x * jnp.sin(x))), args(f32(3, 4)), grad=True),
    Case("empty2_f32", _empty2_plus, args(f32(3, 4))),
    Case("empty_f32", lambda x: x + lax.empty((3, 4), jnp.float32), args(f32(3, 4))),
    Case("empty2_i32", _empty2_plus, args(arr(I32, 3, 4))),
    # lax.platform_dependent: platform_index + cond, resolved to the CPU/default branch
    Case("platform_dependent_diag_f32", jnp.diag, args(f32(4, 4)), grad=True),
    Case("platform_dependent_trace_f32", jnp.trace, args(f32(3, 3)), grad=True),
    Case("nested_jit_f32", jax.jit(lambda x: jax.jit(jnp.tanh)(x) * 2), args(f32(3)),
         grad=True),
]

CASES = SHAPE_CASES
_ = np, BF16
