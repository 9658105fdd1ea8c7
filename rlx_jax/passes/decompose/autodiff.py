"""Decompositions of the backward kinds recognised from JAX's own autodiff output
(passes/recognize.py): each reproduces JAX's computation in primitive IR."""
import numpy as np

from ...ir.ops import OpKind as K
from ...nn.kinds import (conv2d_backward_input_ref, conv2d_backward_weight_ref,
                         gather_dimension_numbers)
from . import decomp
from ._util import inline


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
    lambda b, node, dy, w: inline(b, conv2d_backward_input_ref, (dy, w), **node.attrs))
decomp(K.Conv2dBackwardWeight)(
    lambda b, node, x, dy: inline(b, conv2d_backward_weight_ref, (x, dy), **node.attrs))


def pool_is_tiling(x, a):
    """Non-overlapping, unpadded windows that tile x exactly."""
    return (a["window_dimensions"] == a["window_strides"]
            and all(p == (0, 0) for p in a["padding"])
            and all(d % w == 0 for d, w in zip(x.shape, a["window_dimensions"])))


@decomp(K.MaxPool2dBackward)
def _max_pool_backward(b, node, x, dy):
    """Tiling windows: O(input) reshape + ArgMax + one-hot select (first max of each window,
    as select_and_scatter_add with `ge`); otherwise the SelectAndScatterAdd primitive."""
    a = node.attrs
    if not pool_is_tiling(x, a):
        return b.add(K.SelectAndScatterAdd, (dy, x), {
            "select_prim": "ge", "window_dimensions": a["window_dimensions"],
            "window_strides": a["window_strides"], "padding": a["padding"]})
    win = a["window_dimensions"]
    nd = x.ndim
    outer = tuple(d // w for d, w in zip(x.shape, win))
    split = tuple(v for pair in zip(outer, win) for v in pair)           # [o0, w0, o1, w1, ...]
    perm = tuple(range(0, 2 * nd, 2)) + tuple(range(1, 2 * nd, 2))      # outer axes, then window
    k = int(np.prod(win))
    xs = b.reshape(b.transpose(b.reshape(x, split), perm), outer + (k,))
    first = b.add(K.ArgMax, (xs,), {"axis": nd, "index_dtype": np.dtype(np.int32)})
    ids = b.add(K.Iota, (), {"dtype": np.dtype(np.int32), "shape": (1,) * nd + (k,),
                             "dimension": nd})
    hit = b.compare("eq", b.reshape(first, outer + (1,)), ids)
    routed = b.where(hit, b.reshape(dy, outer + (1,)), b.scalar(0, dy))
    back = b.transpose(b.reshape(routed, outer + win), tuple(np.argsort(perm)))
    return b.reshape(back, x.shape)
