"""Shape and data-movement primitives."""
import numpy as np

from ...ir.dims import dim
from ...ir.ops import OpKind as K
from . import jaxpr_rule


@jaxpr_rule("broadcast_in_dim")
def _broadcast_in_dim(ctx, x, *dyn, shape, broadcast_dimensions, **params):
    """JAX allows the operand's axes to land in any order (dims (1, 0)); the IR's Expand keeps
    them in order, so the operand is transposed first where they are not."""
    dims = tuple(int(d) for d in broadcast_dimensions)
    perm = tuple(int(i) for i in np.argsort(dims, kind="stable"))
    if perm != tuple(range(len(dims))):
        x, dims = ctx.b.transpose(x, perm), tuple(sorted(dims))
    return ctx.b.expand(x, shape, dims)


@jaxpr_rule("reshape")
def _reshape(ctx, x, *dyn, new_sizes, dimensions=None, **params):
    """reshape[dimensions=p] transposes by p first (JAX's AD emits it)."""
    if dimensions is not None:
        x = ctx.b.transpose(x, dimensions)
    return ctx.b.reshape(x, new_sizes)

jaxpr_rule("squeeze")(lambda ctx, x, *, dimensions: ctx.b.reshape(x, ctx.out_avals[0][0]))
jaxpr_rule("transpose")(lambda ctx, x, *, permutation: ctx.b.transpose(x, permutation))
jaxpr_rule("rev")(lambda ctx, x, *, dimensions: ctx.emit(
    K.Reverse, (x,), axes=tuple(int(d) for d in dimensions)))
jaxpr_rule("concatenate")(lambda ctx, *xs, dimension: ctx.emit(
    K.Concat, xs, axis=int(dimension)))
jaxpr_rule("pad")(lambda ctx, x, v, *, padding_config: ctx.emit(
    K.Pad, (x, v), config=tuple(tuple(dim(i) for i in c) for c in padding_config)))


@jaxpr_rule("slice")
def _slice(ctx, x, *, start_indices, limit_indices, strides):
    strides = tuple(int(s) for s in strides) if strides else (1,) * x.ndim
    return ctx.emit(K.Slice, (x,), start=tuple(dim(i) for i in start_indices),
                    limit=tuple(dim(i) for i in limit_indices), strides=strides)


@jaxpr_rule("tile")
def _tile(ctx, x, *, reps):
    """tile = broadcast to [r0, d0, r1, d1, ...] then merge each pair."""
    b = ctx.b
    reps = tuple(dim(r) for r in reps)
    big = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    y = b.expand(x, big, tuple(range(1, 2 * x.ndim, 2)))
    return b.reshape(y, ctx.out_avals[0][0])


@jaxpr_rule("split")
def _split(ctx, x, *, sizes, axis):
    b, outs, start = ctx.b, [], 0
    for s in sizes:
        lo, hi = [0] * x.ndim, list(x.shape)
        lo[axis], hi[axis] = start, start + dim(s)
        outs.append(b.add(K.Slice, (x,), {"start": tuple(lo), "limit": tuple(hi),
                                          "strides": (1,) * x.ndim},
                          out=[(tuple(h - l for l, h in zip(lo, hi)), x.dtype)]))
        start += dim(s)
    return outs


@jaxpr_rule("stack")
def _stack(ctx, *xs, axis):
    b = ctx.b
    shape = list(xs[0].shape)
    shape.insert(axis, 1)
    return ctx.emit(K.Concat, [b.reshape(x, shape) for x in xs], axis=int(axis))


@jaxpr_rule("unstack")
def _unstack(ctx, x, *, axis):
    b, outs = ctx.b, []
    for i in range(x.shape[axis]):
        lo, hi = [0] * x.ndim, list(x.shape)
        lo[axis], hi[axis] = i, i + 1
        s = b.add(K.Slice, (x,), {"start": tuple(lo), "limit": tuple(hi),
                                  "strides": (1,) * x.ndim},
                  out=[(tuple(h - l for l, h in zip(lo, hi)), x.dtype)])
        outs.append(b.reshape(s, x.shape[:axis] + x.shape[axis + 1:]))
    return outs


@jaxpr_rule("iota")
def _iota(ctx, *dyn, dtype, shape, dimension, **params):
    return ctx.emit(K.Iota, (), dtype=np.dtype(dtype), shape=tuple(dim(s) for s in shape),
                    dimension=int(dimension))


@jaxpr_rule("dim_as_value")
def _dim_as_value(ctx, *, dim):
    """A symbolic dimension's value as data (jnp.mean over a symbolic axis divides by it)."""
    return ctx.emit(K.DimSize, (), dim=dim, dtype=np.dtype(ctx.out_avals[0][1]))


@jaxpr_rule("empty2", "empty")
def _empty(ctx, *args, **params):
    """Uninitialised buffers (AD's accumulators): zeros are a valid value."""
    (shape, dtype), = ctx.out_avals
    return ctx.b.expand(ctx.b.const(np.zeros((), dtype)), shape, ())
