"""Gather and scatter with general dimension numbers as MIL gather_nd / scatter_nd.

Both put the indexed operand axes first (transpose), turn batching dims into extra index
components (iota), and handle out-of-bounds indices as JAX does: clamp ("clip",
"promise_in_bounds"), fill for gathers, drop for scatters ("fill"/"fill_or_drop": invalid
updates are routed to an extra padding row that is sliced off afterwards).
"""
import numpy as np

from ....ir.ops import OpKind as K
from .legality import mil_np_dtype
from .shape import reshape, slice_
from .table import mil_rule

SCATTER_MODE = {"replace": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}


def _with_batching(ctx, idx, idx_shape, operand_dims, index_dims):
    """Appends iota index components for batching dims (operand dim j <- indices dim i)."""
    if not operand_dims:
        return idx, idx_shape
    batch_shape = idx_shape[:-1]
    cols = []
    for i in index_dims:
        line = np.arange(batch_shape[i], dtype=np.int32).reshape(
            [batch_shape[i] if a == i else 1 for a in range(len(batch_shape))])
        cols.append(np.broadcast_to(line, batch_shape)[..., None])
    extra = ctx.const(np.concatenate(cols, axis=-1))
    idx = ctx.mb.concat(values=[idx, extra], axis=-1)
    return idx, batch_shape + (idx_shape[-1] + len(cols),)


def _bounds(ctx, idx, dims, shape, window):
    # window: per operand dim, the slice/window size (a dict or a sequence)
    """(clamped indices, validity mask over the batch) for index components `dims`."""
    mb = ctx.mb
    hi = ctx.const(np.array([shape[d] - window[d] for d in dims], np.int32))
    zero = ctx.scalar(0, np.int32)
    clamped = mb.minimum(x=mb.maximum(x=idx, y=zero), y=hi)
    inside = mb.equal(x=clamped, y=idx)
    valid = mb.reduce_min(x=mb.cast(x=inside, dtype="int32"), axes=ctx.ints([-1]),
                          keep_dims=False)
    return clamped, valid


def _int_indices(ctx, idx):
    return idx if ctx.np_dtype(idx) == np.int32 else ctx.mb.cast(x=idx, dtype="int32")


def _fill_value(node, dtype):
    fv = node.attrs.get("fill_value")
    if fv is not None:
        return np.asarray(fv).astype(dtype)
    if dtype == np.bool_:
        return np.asarray(True)
    if dtype.kind == "f":
        return np.asarray(np.nan, dtype)
    return np.asarray(np.iinfo(dtype).min, dtype)


def _zero_columns(ctx, idx, ishape, n):
    """Appends n zero index components: the start is 0 on operand axes the dimension numbers
    do not index (collapsed or partial-window axes, as XLA's full start index)."""
    if not n:
        return idx, ishape
    extra = ctx.const(np.zeros(tuple(ishape[:-1]) + (n,), np.int32))
    return ctx.mb.concat(values=[idx, extra], axis=-1), tuple(ishape[:-1]) + (ishape[-1] + n,)


def _element_indices(ctx, idx, ishape, wins):
    """Window starts [batch..., k] -> element indices [B*W, k]: every start plus the offsets of
    its window on the axes `wins` ((component, size) pairs). Flat, so the index tensor has
    rank 2 whatever the batch and window ranks (Core ML stops at rank 5)."""
    k, nb = ishape[-1], int(np.prod(ishape[:-1], dtype=np.int64))
    if not wins:
        return reshape(ctx, idx, (nb, k)) if len(ishape) != 2 else idx
    nw = int(np.prod([n for _, n in wins]))
    grid = np.zeros(tuple(n for _, n in wins) + (k,), np.int32)
    for j, (comp, n) in enumerate(wins):
        line = np.arange(n, dtype=np.int32).reshape([n if a == j else 1
                                                     for a in range(len(wins))])
        grid[..., comp] = np.broadcast_to(line, grid.shape[:-1])
    idx = ctx.mb.add(x=reshape(ctx, idx, (nb, 1, k)), y=ctx.const(grid.reshape(1, nw, k)))
    return reshape(ctx, idx, (nb * nw, k))


def _reshaped(ctx, x, shape, new):
    return x if tuple(shape) == tuple(new) else reshape(ctx, x, new)


def _moved(ctx, x, perm):
    perm = list(perm)
    return x if perm == list(range(len(perm))) else ctx.mb.transpose(x=x, perm=ctx.ints(perm))


@mil_rule(K.Gather)
def _gather(ctx, node, x, idx):
    """lax.gather: slice the non-indexed axes to the slice sizes (dropping those of size 1),
    clamp the window starts (JAX), expand windows on indexed axes into element indices, one
    flat gather_nd over the indexed axes moved first, then put the offset dims in place."""
    dn = node.attrs["dimension_numbers"]
    sizes = node.attrs["slice_sizes"]
    shape, ishape = node.inputs[0].shape, node.inputs[1].shape
    dtype = mil_np_dtype(node.inputs[0].dtype)
    mb = ctx.mb
    idx = _int_indices(ctx, idx)
    idx, ishape = _with_batching(ctx, idx, ishape, tuple(dn.operand_batching_dims),
                                 tuple(dn.start_indices_batching_dims))
    indexed = tuple(dn.start_index_map) + tuple(dn.operand_batching_dims)
    collapsed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    rest = tuple(d for d in range(len(shape)) if d not in indexed)
    if any(sizes[d] != shape[d] for d in rest):
        x = slice_(ctx, x, [0] * len(shape), [sizes[d] if d in rest else shape[d]
                                              for d in range(len(shape))])
    clamped, valid = _bounds(ctx, idx, indexed, shape, sizes)
    batch = tuple(ishape[:-1])
    wins = [(j, sizes[d]) for j, d in enumerate(indexed) if sizes[d] > 1]
    flat = _element_indices(ctx, clamped, ishape, wins)
    x = _moved(ctx, x, indexed + rest)
    kept = [d for d in rest if sizes[d] > 1]          # size-1 axes come back in the reshape
    x = _reshaped(ctx, x, [shape[d] for d in indexed] + [sizes[d] for d in rest],
                  [shape[d] for d in indexed] + [sizes[d] for d in kept])
    is_bool = dtype == np.bool_
    if is_bool:
        x = mb.cast(x=x, dtype="int32")
    g = mb.gather_nd(x=x, indices=flat)               # [B*W, kept...]
    if is_bool:
        g = mb.cast(x=g, dtype="bool")
    nb, dims = len(batch), [indexed[j] for j, _ in wins] + kept
    nbw = int(np.prod(batch, dtype=np.int64)) * int(np.prod([n for _, n in wins]))
    g = _reshaped(ctx, g, (nbw,) + tuple(sizes[d] for d in kept),
                  batch + tuple(sizes[d] for d in dims))
    g = _moved(ctx, g, list(range(nb)) + [nb + j for j in np.argsort(dims, kind="stable")])
    offsets = [d for d in range(len(shape)) if d not in collapsed]
    mid = batch + tuple(sizes[d] for d in offsets)
    g = _reshaped(ctx, g, batch + tuple(sizes[d] for d in sorted(dims)), mid)
    if node.attrs["mode"] == "fill":
        v = reshape(ctx, valid, batch + (1,) * len(offsets))
        fill = ctx.const(_fill_value(node, dtype))
        g = mb.select(cond=mb.cast(x=v, dtype="bool"), a=g, b=fill)
    out_rank = len(mid)
    off_pos = list(dn.offset_dims)
    batch_pos = [p for p in range(out_rank) if p not in off_pos]
    src = [0] * out_rank
    for j, p in enumerate(batch_pos):
        src[p] = j
    for j, p in enumerate(off_pos):
        src[p] = nb + j
    return _moved(ctx, g, src)


@mil_rule(K.Scatter, K.ScatterAdd)
def _scatter(ctx, node, x, idx, upd):
    """lax.scatter: operand axes that are not indexed but take a partial (or no) update window
    get a zero index component; updates become [B*W, full rest axes...] against flat element
    indices; one scatter_nd over the indexed axes moved first."""
    dn = node.attrs["dimension_numbers"]
    fn = "add" if node.kind is K.ScatterAdd else node.attrs["fn"]
    shape, ishape, ushape = (node.inputs[i].shape for i in range(3))
    dtype = mil_np_dtype(node.inputs[0].dtype)
    mb = ctx.mb
    rank = len(shape)
    idx = _int_indices(ctx, idx)
    idx, ishape = _with_batching(ctx, idx, ishape, tuple(dn.operand_batching_dims),
                                 tuple(dn.scatter_indices_batching_dims))
    indexed = tuple(dn.scatter_dims_to_operand_dims) + tuple(dn.operand_batching_dims)
    inserted = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    window_dims = [d for d in range(rank) if d not in inserted]
    at = dict(zip(window_dims, dn.update_window_dims))     # operand dim -> updates axis
    size = {d: ushape[at[d]] if d in at else 1 for d in range(rank)}
    zeros = tuple(d for d in range(rank) if d not in indexed
                  and (d in inserted or size[d] != shape[d]))
    idx, ishape = _zero_columns(ctx, idx, ishape, len(zeros))
    indexed += zeros
    rest = tuple(d for d in range(rank) if d not in indexed)   # whole rows
    wins = [(j, size[d]) for j, d in enumerate(indexed) if size[d] > 1]
    wdims = [indexed[j] for j, _ in wins]
    upos = [p for p in range(len(ushape)) if p not in dn.update_window_dims]
    ones = [at[d] for d in indexed if d in at and size[d] == 1]
    uperm = upos + [at[d] for d in wdims] + [at[d] for d in rest] + ones
    upd = _moved(ctx, upd, uperm)
    nbw = int(np.prod(ishape[:-1], dtype=np.int64)) * int(np.prod([n for _, n in wins]))
    upd = _reshaped(ctx, upd, [ushape[p] for p in uperm],
                    (nbw,) + tuple(shape[d] for d in rest))
    clamped, valid = _bounds(ctx, idx, indexed, shape, size)
    perm = indexed + rest
    x = _moved(ctx, x, perm)
    tshape = tuple(shape[d] for d in perm)
    drop = node.attrs["mode"] != "clip"       # XLA skips out-of-bounds updates
    extra = size[indexed[0]]
    if drop:   # invalid updates go to extra rows past the end of axis 0
        spare = np.zeros((len(indexed),), np.int32)
        spare[0] = tshape[0]
        v = mb.cast(x=reshape(ctx, valid, tuple(ishape[:-1]) + (1,)), dtype="bool")
        clamped = mb.select(cond=v, a=clamped, b=ctx.const(spare))
        x = mb.concat(values=[x, ctx.const(np.zeros((extra,) + tshape[1:], dtype))], axis=0)
    flat = _element_indices(ctx, clamped, ishape, wins)
    is_bool = dtype == np.bool_
    if is_bool:
        x, upd = mb.cast(x=x, dtype="int32"), mb.cast(x=upd, dtype="int32")
    y = mb.scatter_nd(data=x, indices=flat, updates=upd, mode=SCATTER_MODE[fn])
    if fn in ("min", "max") and dtype.kind == "f":
        # MIL's scatter max / min promise nothing for a NaN, JAX's propagate it: the NaN flags
        # of data and updates, scattered alike (int32), make an element that met one NaN
        def flags(v):
            return mb.cast(x=mb.not_equal(x=v, y=v), dtype="int32")
        seen = mb.scatter_nd(data=flags(x), indices=flat, updates=flags(upd), mode="max")
        y = mb.select(cond=mb.greater(x=seen, y=ctx.scalar(0, np.int32)),
                      a=ctx.like(np.nan, y), b=y)
    if is_bool:
        y = mb.cast(x=y, dtype="bool")
    if drop:
        y = slice_(ctx, y, [0] * len(tshape), tshape)
    return _moved(ctx, y, np.argsort(perm))
