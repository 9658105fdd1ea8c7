"""The reference semantics of the collectives (ops.COLLECTIVES): the result of member 0 of a
group of `axis_size` processes that all hold this operand. For a group of one (axis_size=1)
that is exactly the single-process meaning of JAX's collective; for larger groups it gives the
shapes and dtypes (ir/shapes.py) while only a backend with real collectives (MLX over
mx.distributed) runs the program; the xla reference refuses axis_size > 1.

Every collective node has attrs `axis_name` (the jit's axis_name) and `axis_size`.

Given / Result (`lax.psum(x, "batch")`, `lax.all_gather(x, "batch", axis=1, tiled=True)`):
    %1:f32[4,3] = AllReduce[fn=sum, axis_name=batch, axis_size=2] %0      -> 2 * x
    %2:f32[4,6] = AllGather[axis=1, tiled=True, axis_name=batch, axis_size=2] %0
                                                          -> concatenate([x, x], axis=1)
"""
import jax.numpy as jnp
from jax import lax

from .ops import OpKind as K

ALL_REDUCE_FNS = ("sum", "max", "min")


def all_reduce(x, *, fn, axis_name, axis_size):
    if fn == "sum":
        return x * jnp.asarray(axis_size, x.dtype) if x.dtype != jnp.bool_ else x
    return x


def all_gather(x, *, axis, tiled, axis_name, axis_size):
    if tiled:
        return jnp.concatenate([x] * axis_size, axis=axis)
    return jnp.stack([x] * axis_size, axis=axis)


def reduce_scatter(x, *, axis, tiled, axis_name, axis_size):
    """psum_scatter: the sum over members, split along `axis`; member 0 keeps block 0."""
    if x.shape[axis] % axis_size:
        raise ValueError(f"dimension {axis} of size {x.shape[axis]} does not split into "
                         f"{axis_size} blocks")
    block = x.shape[axis] // axis_size
    part = lax.slice_in_dim(all_reduce(x, fn="sum", axis_name=axis_name, axis_size=axis_size),
                            0, block, axis=axis)
    if tiled:
        return part
    if block != 1:
        raise ValueError(f"untiled psum_scatter needs dimension {axis} of size {axis_size}")
    return jnp.squeeze(part, axis)


def axis_index(*, axis_name, axis_size):
    return jnp.zeros((), jnp.int32)


def ppermute(x, *, perm, axis_name, axis_size):
    """Member 0 receives the operand of the member `src` with (src, 0) in perm, else zeros."""
    if any(dst == 0 for _, dst in perm):
        return x
    return jnp.zeros_like(x)


COLLECTIVE_REFERENCE = {
    K.AllReduce: all_reduce,
    K.AllGather: all_gather,
    K.ReduceScatter: reduce_scatter,
    K.AxisIndex: axis_index,
    K.Ppermute: ppermute,
}
