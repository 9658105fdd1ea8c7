"""Gather and Scatter with XLA's general dimension numbers (including batching dimensions)
and JAX's modes: clip, fill_or_drop and promise_in_bounds.

Both compute, for every element of the result (gather) or of the updates (scatter), the flat
index of the operand element it reads or writes, and then do one `take` or one `.at[]` update
on the flattened operand.
"""
import math

import mlx.core as mx
import numpy as np

from ...ir.ops import OpKind as K
from .table import FLOATS, SIGNED, highest, index_dtype, lowest, mlx_rule, unsupported


def _iota(shape, dim, dt):
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return mx.arange(shape[dim], dtype=dt).reshape(view)


def _place(v, batch_pos, rank):
    """Reshapes v (shape = batch shape) so its axes sit at `batch_pos` of a rank-`rank` array."""
    view = [1] * rank
    for ax, p in enumerate(batch_pos):
        view[p] = v.shape[ax]
    return v.reshape(view)


def _flat_index(operand_shape, window_sizes, starts, window_pos, batching, out_shape,
                batch_pos):
    """Flat operand index per result element and an in-bounds mask over the batch shape.

    starts: {operand dim: start index array over the batch shape};
    window_pos: {operand dim: result axis iterating that window dim};
    batching: {operand dim: batch axis (of the batch shape) it is paired with}.
    """
    rank = len(out_shape)
    dt = index_dtype(math.prod(operand_shape) + 1)
    strides = [math.prod(operand_shape[d + 1:]) for d in range(len(operand_shape))]
    flat, inb = None, None
    for d, dim in enumerate(operand_shape):
        coord = None
        if d in starts:
            s = starts[d].astype(dt)
            hi = dim - window_sizes[d]
            ok = (s >= 0) & (s <= hi)
            inb = ok if inb is None else inb & ok
            s = mx.clip(s, 0, max(hi, 0))
            coord = _place(s, batch_pos, rank)
        if d in batching:
            coord = _iota(out_shape, batch_pos[batching[d]], dt)
        if d in window_pos:
            w = _iota(out_shape, window_pos[d], dt)
            coord = w if coord is None else coord + w
        if coord is None or strides[d] == 0:
            continue
        term = coord * strides[d] if strides[d] != 1 else coord
        flat = term if flat is None else flat + term
    if flat is None:
        flat = mx.zeros((1,) * rank, dt)
    return mx.broadcast_to(flat, out_shape), inb


def _fill_value(dtype, value):
    if value is not None:
        return value
    if dtype in FLOATS:
        return np.nan
    if dtype in SIGNED:
        return lowest(dtype)
    return highest(dtype)


@mlx_rule(K.Gather)
def _gather(ctx, node, x, idx):
    a = node.attrs
    dn, sizes, mode = a["dimension_numbers"], a["slice_sizes"], a["mode"]
    out_shape = node.out.shape
    batch_shape = idx.shape[:-1]
    offset_dims = tuple(dn.offset_dims)
    batch_pos = [p for p in range(len(out_shape)) if p not in offset_dims]
    window_dims = [d for d in range(x.ndim)
                   if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    starts = {d: idx[..., k] for k, d in enumerate(dn.start_index_map)}
    window_pos = {d: offset_dims[i] for i, d in enumerate(window_dims) if sizes[d] > 1}
    batching = dict(zip(dn.operand_batching_dims, dn.start_indices_batching_dims))
    if len(batch_shape) != len(batch_pos):
        unsupported(node, "gather whose index vector is not the last indices dimension")
    flat, inb = _flat_index(x.shape, sizes, starts, window_pos, batching, out_shape,
                            batch_pos)
    out = mx.take(x.reshape(-1), flat)
    if mode in FILL_MODES and inb is not None:
        fill = mx.array(_fill_value(x.dtype, a.get("fill_value")), dtype=x.dtype)
        out = mx.where(_place(inb, batch_pos, len(out_shape)), out, fill)
    return out


FILL_MODES = ("fill", "fill_or_drop", "drop")   # clip and promise_in_bounds clamp, as XLA
SCATTER = {"add": "add", "mul": "multiply", "min": "minimum", "max": "maximum"}


@mlx_rule(K.Scatter, K.ScatterAdd)
def _scatter(ctx, node, x, idx, upd):
    a = node.attrs
    dn, mode = a["dimension_numbers"], a["mode"]
    fn = "add" if node.kind is K.ScatterAdd else a["fn"]
    uwin = tuple(dn.update_window_dims)
    batch_pos = [p for p in range(upd.ndim) if p not in uwin]
    window_dims = [d for d in range(x.ndim)
                   if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    sizes = [1] * x.ndim
    for i, d in enumerate(window_dims):
        sizes[d] = upd.shape[uwin[i]]
    starts = {d: idx[..., k] for k, d in enumerate(dn.scatter_dims_to_operand_dims)}
    window_pos = {d: uwin[i] for i, d in enumerate(window_dims) if sizes[d] > 1}
    batching = dict(zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims))
    if idx.ndim - 1 != len(batch_pos):
        unsupported(node, "scatter whose index vector is not the last indices dimension")
    flat, inb = _flat_index(x.shape, sizes, starts, window_pos, batching, upd.shape,
                            batch_pos)
    n = x.size
    if mode != "clip" and inb is not None:   # XLA drops out-of-bounds update windows
        flat = mx.where(_place(inb, batch_pos, upd.ndim), flat, mx.array(n, dtype=flat.dtype))
    base = mx.concatenate([x.reshape(-1), mx.zeros((1,), x.dtype)])
    flat, vals = flat.reshape(-1), upd.reshape(-1).astype(x.dtype)
    if fn == "replace":
        base[flat] = vals
        out = base
    elif x.dtype == mx.bool_ and fn in ("add", "max", "mul", "min"):
        ints = base.astype(mx.uint8).at[flat]
        v = vals.astype(mx.uint8)
        out = (ints.maximum(v) if fn in ("add", "max") else ints.minimum(v)) != 0
    else:
        out = getattr(base.at[flat], SCATTER[fn])(vals)
        if fn in ("max", "min") and x.dtype in FLOATS:
            out = _scatter_nan(base, flat, vals, out)
    return out[:n].reshape(x.shape)


def _scatter_nan(base, flat, vals, out):
    """XLA's scatter max/min propagate NaN from the operand and from every update; MLX's
    keep whichever compares last, so a NaN already in the operand (or a NaN update followed
    by another update of the same element) is lost. The NaNs are put back afterwards."""
    hit = mx.zeros(base.shape, mx.uint8).at[flat].maximum(mx.isnan(vals).astype(mx.uint8))
    nan = mx.array(np.nan, dtype=base.dtype)
    return mx.where(mx.isnan(base), base, mx.where(hit != 0, nan, out))
