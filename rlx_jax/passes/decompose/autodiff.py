"""Decompositions of the backward kinds recognised from JAX's own autodiff output
(passes/recognize.py): each reproduces JAX's computation in primitive IR."""
import numpy as np

from ...ir.ops import OpKind as K
from ...ir.reference import (conv2d_backward_input, conv2d_backward_weight,
                             gather_dimension_numbers)
from . import decomp
from .formulas import inline


@decomp(K.CumsumBackward)
def _cumsum_backward(b, node, dy):
    a = node.attrs
    return b.add(K.Cumsum, (dy,), {"axis": a["axis"], "reverse": not a["reverse"]})


@decomp(K.GatherBackward)
def _gather_backward(b, node, dy, indices):
    """ScatterAdd of dy into zeros[num, ...] (the transpose of the embedding gather)."""
    a = node.attrs
    slice_shape = dy.shape[indices.ndim:]
    zeros = b.expand(b.scalar(0, dy), (a["num"],) + slice_shape, dims=())
    want = indices.shape + (1,)
    src = indices.node
    if src is not None and src.kind is K.Reshape and src.inputs[0].shape == want:
        idx = src.inputs[0]          # undo the Reshape recognition put in front
    else:
        idx = b.reshape(indices, want)
    return b.add(K.ScatterAdd, (zeros, idx, dy), {
        "dimension_numbers": gather_dimension_numbers(indices.ndim, len(slice_shape)),
        "mode": a["mode"], "indices_are_sorted": False, "unique_indices": False})


decomp(K.Conv2dBackwardInput)(
    lambda b, node, dy, w: inline(b, conv2d_backward_input, (dy, w), **node.attrs))
decomp(K.Conv2dBackwardWeight)(
    lambda b, node, x, dy: inline(b, conv2d_backward_weight, (x, dy), **node.attrs))


def pool_is_tiling(x, a):
    """Non-overlapping, unpadded windows that tile x exactly."""
    return (a["window_dimensions"] == a["window_strides"]
            and all(p == (0, 0) for p in a["padding"])
            and all(d % w == 0 for d, w in zip(x.shape, a["window_dimensions"])))


@decomp(K.MaxPool2dBackward)
def _max_pool_backward(b, node, x, dy):
    """Tiling windows: O(input) Reshape/Transpose + ArgMax + one-hot Where (first max of each
    window, as select_and_scatter_add with `ge`), at most rank 5 (Core ML's limit) for 2-D
    windows; otherwise the SelectAndScatterAdd primitive."""
    a = node.attrs
    if not pool_is_tiling(x, a):
        return b.add(K.SelectAndScatterAdd, (dy, x), {
            "select_prim": "ge", "window_dimensions": a["window_dimensions"],
            "window_strides": a["window_strides"], "padding": a["padding"]})
    win = a["window_dimensions"]
    free = [i for i in range(x.ndim) if win[i] == 1]
    wax = [i for i in range(x.ndim) if win[i] > 1]
    perm = tuple(free + wax)
    nf = int(np.prod([x.shape[i] for i in free], dtype=np.int64))
    outer = tuple(x.shape[i] // win[i] for i in wax)
    kw = tuple(win[i] for i in wax)
    k, m = int(np.prod(kw, dtype=np.int64)), len(wax)
    split = (nf,) + tuple(v for pair in zip(outer, kw) for v in pair)   # [F, o0, w0, o1, w1]
    gather = (0,) + tuple(range(1, 2 * m, 2)) + tuple(range(2, 2 * m + 1, 2))
    xs = b.transpose(b.reshape(b.transpose(x, perm), split), gather)
    xs = b.reshape(xs, (nf,) + outer + (k,))
    first = b.add(K.ArgMax, (xs,), {"axis": m + 1, "index_dtype": np.dtype(np.int32)})
    ids = b.add(K.Iota, (), {"dtype": np.dtype(np.int32), "shape": (1,) * (m + 1) + (k,),
                             "dimension": m + 1})
    hit = b.compare("eq", b.reshape(first, (nf,) + outer + (1,)), ids)
    dys = b.reshape(b.transpose(dy, perm), (nf,) + outer + (1,))
    dys = b.expand(dys, (nf,) + outer + (k,), dims=tuple(range(m + 2)))
    routed = b.reshape(b.where(hit, dys, b.scalar(0, dy)), (nf,) + outer + kw)
    back = b.reshape(b.transpose(routed, tuple(np.argsort(gather))),
                     tuple(x.shape[i] for i in perm))
    return b.transpose(back, tuple(np.argsort(perm)))
