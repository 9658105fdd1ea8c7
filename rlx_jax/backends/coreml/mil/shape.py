"""Shape and data-movement MIL rules: Reshape, Transpose, Expand, Concat, Reverse, Slice,
Narrow, Pad, DynamicSlice, DynamicUpdateSlice; and the edge and interior padding the window and
convolution rules share (pad_edges, pad_interior)."""
import numpy as np

from ....ir.dims import symbolic_shape
from ....ir.ops import OpKind as K
from .legality import mil_np_dtype
from .table import check_const_size, mil_rule


def reshape(ctx, x, shape):
    return ctx.mb.reshape(x=x, shape=ctx.ints(shape))


mil_rule(K.Reshape)(lambda ctx, node, x: reshape(ctx, x, node.attrs["shape"]))
mil_rule(K.Transpose)(lambda ctx, node, x: ctx.mb.transpose(x=x, perm=ctx.ints(
    node.attrs["perm"])))
mil_rule(K.Reverse)(lambda ctx, node, x: ctx.mb.reverse(x=x, axes=ctx.ints(node.attrs["axes"]))
                    if node.attrs["axes"] else x)
mil_rule(K.Concat)(lambda ctx, node, *xs: ctx.mb.concat(values=list(xs),
                                                         axis=node.attrs["axis"]))


def slice_(ctx, x, start, limit, strides=None):
    """slice_by_index; a slice whose value is known (it lies in constant padding) becomes a
    constant of x's dtype: coremltools' const_elimination would fold it to a constant of the
    wrong dtype (int32 for a float or bool block) that no longer type-checks with its users."""
    strides = strides or (1,) * len(start)
    out = ctx.mb.slice_by_index(x=x, begin=ctx.ints(start), end=ctx.ints(limit),
                                stride=ctx.ints(strides))
    if out.val is not None and np.size(out.val):
        return ctx.const(np.asarray(out.val).astype(ctx.np_dtype(x)))
    return out


mil_rule(K.Slice)(lambda ctx, node, x: slice_(ctx, x, node.attrs["start"], node.attrs["limit"],
                                              node.attrs["strides"]))


@mil_rule(K.Narrow)
def _narrow(ctx, node, x):
    a, shape = node.attrs, node.inputs[0].shape
    start, limit = [0] * len(shape), list(shape)
    start[a["axis"]], limit[a["axis"]] = a["start"], a["start"] + a["length"]
    return slice_(ctx, x, start, limit)


def expand(ctx, x, in_shape, shape, dims):
    """broadcast_in_dim: reshape to the output rank, then tile the size-1 axes."""
    full = [1] * len(shape)
    for d, s in zip(dims, in_shape):
        full[d] = s
    if tuple(full) != tuple(in_shape):
        x = reshape(ctx, x, full)
    reps = [o if f == 1 else 1 for f, o in zip(full, shape)]
    if all(r == 1 for r in reps):
        return x
    if x.val is not None and not symbolic_shape(shape):   # coremltools computes the tiled
        check_const_size(shape, np.asarray(x.val).dtype, "a broadcast constant")   # value now
    return ctx.mb.tile(x=x, reps=ctx.ints(reps))


mil_rule(K.Expand)(lambda ctx, node, x: expand(ctx, x, node.inputs[0].shape, node.attrs["shape"],
                                               node.attrs["dims"]))


def _fill(ctx, shape, value, dtype):
    return ctx.const(np.full(shape, value, dtype=dtype))


def pad_edges(ctx, x, shape, pads, value, dtype):
    """Positive edge padding of `x` (of `shape`) by `pads` ((lo, hi) per axis) with `value` (any
    dtype) as concatenated constant blocks; returns (the padded var, its shape)."""
    for ax, (lo, hi) in enumerate(pads):
        parts = [x]
        if lo:
            parts.insert(0, _fill(ctx, shape[:ax] + (lo,) + shape[ax + 1:], value, dtype))
        if hi:
            parts.append(_fill(ctx, shape[:ax] + (hi,) + shape[ax + 1:], value, dtype))
        if len(parts) > 1:
            x = ctx.mb.concat(values=parts, axis=ax)
            shape = shape[:ax] + (shape[ax] + lo + hi,) + shape[ax + 1:]
    return x, shape


def pad_interior(ctx, x, shape, axis, k, value, dtype):
    """Inserts k copies of `value` between neighbours of `x` (of `shape`) along `axis` (interior
    padding, lhs dilation); returns (the padded var, its shape)."""
    n = shape[axis]
    wide = list(shape[:axis + 1]) + [1] + list(shape[axis + 1:])
    x = reshape(ctx, x, wide)
    gap = list(wide)
    gap[axis + 1] = k
    x = ctx.mb.concat(values=[x, _fill(ctx, gap, value, dtype)], axis=axis + 1)
    flat = list(shape)
    flat[axis] = n * (k + 1)
    x = reshape(ctx, x, flat)
    end = list(flat)
    end[axis] = n + (n - 1) * k
    return slice_(ctx, x, [0] * len(shape), end), tuple(end)


@mil_rule(K.Pad)
def _pad(ctx, node, x, v):
    """lax.pad. Bools are padded as int32 and cast back: when the cropping leaves only
    padding, coremltools' const_elimination folds the slice of a constant bool block into an
    int32 value that no longer type-checks."""
    dtype = mil_np_dtype(node.inputs[0].dtype)
    if dtype != np.bool_:
        return _pad_value(ctx, node, x, v, dtype)
    mb = ctx.mb
    xi, vi = mb.cast(x=x, dtype="int32"), mb.cast(x=v, dtype="int32")
    return mb.cast(x=_pad_value(ctx, node, xi, vi, np.dtype(np.int32)), dtype="bool")


def _pad_value(ctx, node, x, v, dtype):
    """A padding value computed at run time: pad with zeros, then select it into the padded
    positions (a constant mask)."""
    if v.val is not None:
        return _pad_const(ctx, node, x, np.asarray(v.val).astype(dtype), dtype)
    import jax
    mask = np.asarray(jax.lax.pad(np.zeros(node.inputs[0].shape, np.bool_), np.bool_(True),
                                  node.attrs["config"]))
    if mask.all():      # nothing of x is left: a select of constants trips coremltools' passes
        return expand(ctx, v, (), mask.shape, ())
    y = _pad_const(ctx, node, x, np.zeros((), dtype), dtype)
    return ctx.mb.select(cond=ctx.const(mask), a=v, b=y)


def _pad_const(ctx, node, x, value, dtype):
    """Interior padding by concat+reshape, then positive edges by MIL pad (floats) or
    concatenated constant blocks (int, bool), then negative edges by slicing. Growing before
    cropping matters: a negative low edge may cut into the high padding (lo=-2, hi=2 on one
    element keeps one padding value)."""
    shape = tuple(node.inputs[0].shape)
    config = node.attrs["config"]
    for ax, (lo, hi, k) in enumerate(config):
        if k > 0 and shape[ax] > 1:
            x, shape = pad_interior(ctx, x, shape, ax, k, value, dtype)
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config]
    if any(lo or hi for lo, hi in grow):
        if dtype.kind == "f":
            pads = ctx.ints([p for pair in grow for p in pair])
            x = ctx.mb.pad(x=x, pad=pads, mode="constant", constant_val=value)
            shape = tuple(d + lo + hi for d, (lo, hi) in zip(shape, grow))
        else:
            x, shape = pad_edges(ctx, x, shape, grow, value, dtype)
    start = [max(-lo, 0) for lo, _, _ in config]
    limit = [d - max(-hi, 0) for d, (_, hi, _) in zip(shape, config)]
    if any(start) or list(limit) != list(shape):
        x = slice_(ctx, x, start, limit)
    return x


def _clamped_starts(ctx, starts, shape, sizes):
    """JAX's dynamic-slice starts, each clamped into [0, dim - size], as one int32 [rank]."""
    mb, begin = ctx.mb, []
    for s, d, size in zip(starts, shape, sizes):
        s = mb.cast(x=s, dtype="int32") if ctx.np_dtype(s) != np.int32 else s
        s = mb.minimum(x=mb.maximum(x=s, y=ctx.scalar(0, np.int32)),
                       y=ctx.scalar(d - size, np.int32))
        begin.append(reshape(ctx, s, (1,)))
    return begin[0] if len(begin) == 1 else mb.concat(values=begin, axis=0)


@mil_rule(K.DynamicSlice)
def _dynamic_slice(ctx, node, x, *starts):
    """lax.dynamic_slice clamps each start into [0, dim - size]."""
    sizes = node.attrs["sizes"]
    begin = _clamped_starts(ctx, starts, node.inputs[0].shape, sizes)
    return ctx.mb.slice_by_size(x=x, begin=begin, size=ctx.ints(sizes))


@mil_rule(K.DynamicUpdateSlice)
def _dynamic_update_slice(ctx, node, x, u, *starts):
    """Clamped starts -> one flat offset; the update's flat element offsets are a constant;
    scatter_nd into the flattened operand. Flat, the index grid has rank 2 whatever the
    operand's rank (a grid of the update's shape would need rank 6 for a rank-5 update)."""
    mb = ctx.mb
    shape, ushape = tuple(node.inputs[0].shape), tuple(node.inputs[1].shape)
    if not shape:
        return u
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1].astype(np.int64)
    begin = _clamped_starts(ctx, starts, shape, ushape)
    offset = mb.reduce_sum(x=mb.mul(x=begin, y=ctx.const(strides.astype(np.int32))),
                           axes=ctx.ints([0]), keep_dims=True)
    base = np.indices(ushape).reshape(len(shape), -1).T @ strides
    idx = mb.add(x=ctx.const(base.astype(np.int32)[:, None]), y=offset)
    is_bool = node.inputs[0].dtype == np.bool_
    if is_bool:
        x, u = mb.cast(x=x, dtype="int32"), mb.cast(x=u, dtype="int32")
    y = mb.scatter_nd(data=reshape(ctx, x, (int(np.prod(shape)),)), indices=idx,
                      updates=reshape(ctx, u, (int(np.prod(ushape)),)), mode="update")
    y = reshape(ctx, y, shape)
    return mb.cast(x=y, dtype="bool") if is_bool else y


@mil_rule(K.DimSize)
def _dim_size(ctx, node):
    """A symbolic dimension's size as data, computed from the inputs' shapes (mil/dynamic.py);
    only graphs with symbolic shapes hold DimSize."""
    from .dynamic import size
    from .legality import mil_dtype_name
    value = ctx.mb.reshape(x=size(ctx, node.attrs["dim"]), shape=np.zeros((0,), np.int32))
    dtype = mil_np_dtype(node.out.dtype)
    return value if dtype == np.int32 else ctx.mb.cast(x=value, dtype=mil_dtype_name(dtype))
