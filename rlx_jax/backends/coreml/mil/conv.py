"""Convolutions and windowed reductions (Pool) as MIL.

Conv: any layout (transposes to MIL's NC[spatial] / O I [spatial]), feature groups, strides,
rhs dilation and explicit padding go to MIL conv; batch groups (the kernel-gradient form of a
grouped conv) become feature groups by moving the batch blocks into the channels; lhs dilation
(the input-gradient form) is zero-interleaving first; negative padding is a slice. Pool: max
over 1-3 window axes with unit dilation goes to MIL max_pool; every other configuration is an
exact composition of strided slices combined with maximum/minimum/add over the (padded) input.
"""
import itertools

import numpy as np

from ....ir.ops import OpKind as K
from .legality import MAX_RANK, mil_dtype_name, mil_np_dtype
from .shape import pad_edges, pad_interior, reshape, slice_
from ....ir.identities import identity as init_value
from .table import mil_rule, refuse


def _edges(ctx, x, shape, pads, value, dtype, axes):
    """Applies (lo, hi) edge padding on `axes`: slices for negative, constant pad for positive.
    Returns (x, shape, remaining positive pads per axis)."""
    start = [0] * len(shape)
    limit = list(shape)
    for a, (lo, hi) in zip(axes, pads):
        start[a], limit[a] = max(-lo, 0), shape[a] - max(-hi, 0)
    if any(start) or limit != list(shape):
        x = slice_(ctx, x, start, limit)
        shape = tuple(b - a for a, b in zip(start, limit))
    return x, shape, [(max(lo, 0), max(hi, 0)) for lo, hi in pads]


def _dilate(ctx, x, shape, axes, factors, value, dtype):
    """Zero-interleaving (or `value`-interleaving) by `factors` along `axes`. pad_interior adds
    an axis next to the dilated one, so at full rank the axes before and after it are merged
    first (the step stays at rank 4) and split again after."""
    for a, f in zip(axes, factors):
        if f > 1 and shape[a] > 1:
            if len(shape) < MAX_RANK:
                x, shape = pad_interior(ctx, x, shape, a, f - 1, value, dtype)
                continue
            pre, post = int(np.prod(shape[:a])), int(np.prod(shape[a + 1:]))
            y, (_, n, _) = pad_interior(ctx, reshape(ctx, x, (pre, shape[a], post)),
                                         (pre, shape[a], post), 1, f - 1, value, dtype)
            shape = shape[:a] + (n,) + shape[a + 1:]
            x = reshape(ctx, y, shape)
    return x, shape


def _batch_groups_as_features(ctx, x, shape, g):
    """x: [N, C, spatial...] -> [N/g, g·C, spatial...]: batch group j becomes feature group j,
    so that a conv with `groups=g` computes the batch-grouped conv (output feature block j
    reads batch block j). JAX's kernel gradient of a feature-grouped conv is such a conv."""
    n, c, sp = shape[0], shape[1], shape[2:]
    p = int(np.prod(sp))
    x = reshape(ctx, x, (g, n // g, c, p))
    x = ctx.mb.transpose(x=x, perm=ctx.ints([1, 0, 2, 3]))
    shape = (n // g, g * c) + tuple(sp)
    return reshape(ctx, x, shape), shape


@mil_rule(K.Conv)
def _conv(ctx, node, x, w):
    a = node.attrs
    lhs_spec, rhs_spec, out_spec = a["dimension_numbers"]
    nsp = len(lhs_spec) - 2
    if not 1 <= nsp <= 3:
        refuse(node, f"{nsp} spatial dimensions (MIL conv takes 1 to 3)")
    mb = ctx.mb
    dtype = mil_np_dtype(node.out.dtype)
    if dtype.kind != "f" or node.inputs[0].dtype.kind != "f":
        refuse(node, f"integer convolution ({node.inputs[0].dtype.name} -> {dtype.name}); "
               "MIL conv is floating-point only", "cast the operands to float32")
    if ctx.np_dtype(x) != dtype:
        x = mb.cast(x=x, dtype=mil_dtype_name(dtype))
        w = mb.cast(x=w, dtype=mil_dtype_name(dtype))
    if tuple(lhs_spec) != tuple(range(nsp + 2)):
        x = mb.transpose(x=x, perm=ctx.ints(lhs_spec))
    if tuple(rhs_spec) != tuple(range(nsp + 2)):
        w = mb.transpose(x=w, perm=ctx.ints(rhs_spec))
    shape = tuple(node.inputs[0].shape[d] for d in lhs_spec)
    groups = a["feature_group_count"]
    if a["batch_group_count"] > 1:                      # JAX: then feature_group_count == 1
        groups = a["batch_group_count"]
        x, shape = _batch_groups_as_features(ctx, x, shape, groups)
    spatial = tuple(range(2, nsp + 2))
    x, shape = _dilate(ctx, x, shape, spatial, a["lhs_dilation"], 0, dtype)
    x, shape, pads = _edges(ctx, x, shape, a["padding"], 0, dtype, spatial)
    # Core ML refuses dilation with a run-time weight: dilate the weight itself instead
    wshape = tuple(node.inputs[1].shape[d] for d in rhs_spec)
    w, _ = _dilate(ctx, w, wshape, spatial, a["rhs_dilation"], 0, dtype)
    y = mb.conv(x=x, weight=w, strides=ctx.ints(a["window_strides"]), pad_type="custom",
                pad=ctx.ints([p for pair in pads for p in pair]), groups=groups)
    perm = [0] * (nsp + 2)
    for i, d in enumerate(out_spec):
        perm[d] = i
    if perm != list(range(nsp + 2)):
        y = mb.transpose(x=y, perm=ctx.ints(perm))
    return y


def _native_max_pool(ctx, node, x):
    """max over 1-3 window axes, unit dilations: transpose the window axes last, fold the rest
    into [1, C], pad with -inf (MIL gives max_pool's padding no value), MIL max_pool, and
    undo. MIL's max_pool promises nothing for a NaN, JAX's propagates it: the same max_pool
    takes the NaN flags of x as C more channels, and a window with a NaN is NaN."""
    a, shape = node.attrs, node.inputs[0].shape
    win = [d for d in range(len(shape)) if a["window_dimensions"][d] != 1
           or a["window_strides"][d] != 1 or a["padding"][d] != (0, 0)]
    other = [d for d in range(len(shape)) if d not in win]
    mb = ctx.mb
    perm = other + win
    if perm != list(range(len(shape))):
        x = mb.transpose(x=x, perm=ctx.ints(perm))
    c = int(np.prod([shape[d] for d in other], dtype=np.int64))
    x = mb.reshape(x=x, shape=ctx.ints([1, c] + [shape[d] for d in win]))
    pads = [p for d in win for p in a["padding"][d]]
    if any(pads):
        x = mb.pad(x=x, pad=ctx.ints([0, 0, 0, 0] + pads), mode="constant",
                   constant_val=ctx.like(-np.inf, x))
    flags = mb.cast(x=mb.not_equal(x=x, y=x), dtype=mil_dtype_name(ctx.np_dtype(x)))
    both = mb.max_pool(x=mb.concat(values=[x, flags], axis=1),
                       kernel_sizes=ctx.ints([a["window_dimensions"][d] for d in win]),
                       strides=ctx.ints([a["window_strides"][d] for d in win]),
                       pad_type="valid")
    y, nan = mb.split(x=both, num_splits=2, axis=1)
    y = mb.select(cond=mb.greater(x=nan, y=ctx.like(0, nan)), a=ctx.like(np.nan, y), b=y)
    out = node.out.shape
    y = mb.reshape(x=y, shape=ctx.ints([out[d] for d in perm]))
    if perm != list(range(len(shape))):
        y = mb.transpose(x=y, perm=ctx.ints(np.argsort(perm)))
    return y


COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


def _windows(ctx, x, out, a):
    """(offset, strided slice) for every window position over a padded input."""
    for offs in itertools.product(*[range(k) for k in a["window_dimensions"]]):
        start = [o * dl for o, dl in zip(offs, a.get("window_dilation") or [1] * len(offs))]
        limit = [s + (n - 1) * st + 1 for s, n, st in zip(start, out, a["window_strides"])]
        yield start, slice_(ctx, x, start, limit, a["window_strides"])


def _max_pool_fits(node):
    a, shape = node.attrs, node.inputs[0].shape
    win = [d for d in range(len(shape)) if a["window_dimensions"][d] != 1
           or a["window_strides"][d] != 1 or a["padding"][d] != (0, 0)]
    return (a["fn"] == "max" and node.out.dtype.kind == "f" and 1 <= len(win) <= 3
            and set(a["base_dilation"]) == {1} and set(a["window_dilation"]) == {1}
            and all(lo >= 0 and hi >= 0 and max(lo, hi) < a["window_dimensions"][d]
                    for d, (lo, hi) in enumerate(a["padding"])))


@mil_rule(K.Pool)
def _pool(ctx, node, x):
    """lax.reduce_window with add/max/min."""
    if _max_pool_fits(node):
        return _native_max_pool(ctx, node, x)
    a = node.attrs
    fn, dtype = a["fn"], mil_np_dtype(node.inputs[0].dtype)
    if dtype == np.bool_:
        refuse(node, "windowed reduction of bool", "cast to int32 first")
    init = init_value(fn, dtype)
    shape = tuple(node.inputs[0].shape)
    axes = tuple(range(len(shape)))
    x, shape = _dilate(ctx, x, shape, axes, a["base_dilation"], init, dtype)
    x, shape, pads = _edges(ctx, x, shape, a["padding"], init, dtype, axes)
    x, shape = pad_edges(ctx, x, shape, pads, init, dtype)
    acc = _combined(ctx, x, node.out.shape, a, COMBINE[fn])
    if fn != "sum" and dtype.kind == "f":
        # MIL's maximum / minimum promise nothing for a NaN: the windows' NaN flags, combined
        # alike (int32), make a window with a NaN NaN, as in JAX
        flags = ctx.mb.cast(x=ctx.mb.not_equal(x=x, y=x), dtype="int32")
        seen = _combined(ctx, flags, node.out.shape, a, "maximum")
        acc = ctx.mb.select(cond=ctx.mb.greater(x=seen, y=ctx.scalar(0, np.int32)),
                            a=ctx.like(np.nan, acc), b=acc)
    return acc


def _combined(ctx, x, out, a, op):
    acc = None
    for _, part in _windows(ctx, x, out, a):
        acc = part if acc is None else getattr(ctx.mb, op)(x=acc, y=part)
    return acc


@mil_rule(K.SelectAndScatterAdd)
def _select_and_scatter_add(ctx, node, source, operand):
    """Max-pool (select ge) / min-pool (le) backward, O(window) ops: for each window offset
    the first position equal to the window's best takes the cotangent; each offset's share is
    placed back with interior+edge padding and summed. (A window holding NaN: which position
    takes it is unspecified, docs/mil-semantics.md.)"""
    a = node.attrs
    mb = ctx.mb
    dtype = mil_np_dtype(node.inputs[1].dtype)
    if dtype.kind != "f":
        refuse(node, f"select_and_scatter_add on {dtype.name}")
    fn = "max" if a["select_prim"] == "ge" else "min"
    shape = tuple(node.inputs[1].shape)
    out = tuple(node.inputs[0].shape)
    x, pshape = operand, shape
    if any(lo < 0 or hi < 0 for lo, hi in a["padding"]):
        refuse(node, "negative padding")
    x, pshape = pad_edges(ctx, x, pshape, a["padding"], init_value(fn, dtype), dtype)
    parts = list(_windows(ctx, x, out, a))
    best = parts[0][1]
    for _, p in parts[1:]:
        best = getattr(mb, COMBINE[fn])(x=best, y=p)
    zero = ctx.scalar(0, dtype)
    taken, acc = None, None
    for start, p in parts:
        hit = mb.equal(x=p, y=best)
        if taken is not None:
            hit = mb.logical_and(x=hit, y=mb.logical_not(x=taken))
        taken = hit if taken is None else mb.logical_or(x=taken, y=hit)
        share = mb.select(cond=hit, a=source, b=zero)
        cur = out
        for ax, st in enumerate(a["window_strides"]):
            if st > 1 and cur[ax] > 1:
                share, cur = pad_interior(ctx, share, cur, ax, st - 1, np.zeros((), dtype), dtype)
        pads = [(s, p_ - s - c) for s, p_, c in zip(start, pshape, cur)]
        share = mb.pad(x=share, pad=ctx.ints([v for pr in pads for v in pr]), mode="constant",
                       constant_val=np.zeros((), dtype))
        acc = share if acc is None else mb.add(x=acc, y=share)
    lo = [p[0] for p in a["padding"]]
    if any(lo) or pshape != shape:
        acc = slice_(ctx, acc, lo, [l_ + d for l_, d in zip(lo, shape)])
    return acc
