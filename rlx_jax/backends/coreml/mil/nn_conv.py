"""Native MIL kernels for the CNN backward kinds: MaxPool2dBackward, Conv2dBackwardInput,
Conv2dBackwardWeight (docs/high-level-kinds.md; attributes are the forward op's).

Each is claimed only for the configurations it handles (CLAIM_PREDICATES, consulted by
legalization): any other node of these kinds is decomposed instead.

MaxPool2dBackward, non-overlapping unpadded windows that tile the input (at most rank 5 once
split): reshape the windows into rows, the first maximum of each row (as select_and_scatter_add
with `ge`; a min over the indices of the maxima, since MIL's reduce_argmax promises no tie
order), compare with the window positions and select dy there. No scatter, 13 ops whatever the
size, O(input) work. Which position of a window holding NaN takes dy is unspecified.
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....passes.decompose.autodiff import pool_is_tiling
from .reduce import first_best
from .shape import pad_interior, slice_
from ....tables import NATIVE_BACKWARD
from .table import mil_rule, refuse

MAX_RANK = 5


# ---- MaxPool2dBackward ----
def pool_factors(shape, win):
    """x's shape with each windowed axis split into (outer, window) and runs of adjacent outer
    factors merged: (factors, is_window flags)."""
    factors, is_win = [], []
    for d, w in zip(shape, win):
        if factors and not is_win[-1]:
            factors[-1] *= d // w
        else:
            factors.append(d // w)
            is_win.append(False)
        if w > 1:
            factors.append(w)
            is_win.append(True)
    return factors, is_win


def max_pool_backward_fits(node):
    x, a = node.inputs[0], node.attrs
    return (x.dtype.kind == "f" and pool_is_tiling(x, a)
            and len(pool_factors(x.shape, a["window_dimensions"])[0]) <= MAX_RANK)


@mil_rule(K.MaxPool2dBackward, claim=NATIVE_BACKWARD, when=max_pool_backward_fits)
def _max_pool_backward(ctx, node, x, dy):
    if not max_pool_backward_fits(node):
        refuse(node, "the native kernel takes non-overlapping unpadded windows that tile x",
               "legalize with the backend's claims (kept_kinds), which decompose this node")
    mb, shape = ctx.mb, node.inputs[0].shape
    factors, is_win = pool_factors(shape, node.attrs["window_dimensions"])
    perm = [i for i, w in enumerate(is_win) if not w] + [i for i, w in enumerate(is_win) if w]
    k = int(np.prod(node.attrs["window_dimensions"]))
    m = int(np.prod(node.inputs[1].shape))
    rows = mb.reshape(x=x, shape=ctx.ints(factors))
    if perm != sorted(perm):
        rows = mb.transpose(x=rows, perm=ctx.ints(perm))
    rows = mb.reshape(x=rows, shape=ctx.ints([m, k]))
    first = first_best(ctx, rows, 1, (m, k), "reduce_max")                       # [M, 1]
    hit = mb.equal(x=first, y=ctx.const(np.arange(k, dtype=np.int32)))           # [M, K]
    zeros = ctx.const(np.zeros((1, k), ctx.np_dtype(x)))     # [1, K]: select's shape is a's ⊔ b's
    routed = mb.select(cond=hit, a=mb.reshape(x=dy, shape=ctx.ints([m, 1])), b=zeros)
    routed = mb.reshape(x=routed, shape=ctx.ints([factors[i] for i in perm]))
    if perm != sorted(perm):
        routed = mb.transpose(x=routed, perm=ctx.ints(np.argsort(perm)))
    return mb.reshape(x=routed, shape=ctx.ints(shape))


# ---- convolution backward (2 spatial dims) ----
# Core ML convolutions whose weight is computed at run time (training) take no dilations, and
# conv_transpose takes constant weights only: the kernels below avoid both where they must.
def _ones(v):
    return set(v) == {1}


def _is_const(v):
    return v.node is not None and v.node.kind is K.Constant


def conv_input_backward_fits(node):
    a = node.attrs
    return (len(a["dimension_numbers"][0]) == 4 and _ones(a["lhs_dilation"])
            and a["batch_group_count"] == 1 and node.out.dtype.kind == "f"
            and (_ones(a["rhs_dilation"]) or _is_const(node.inputs[1])))


def conv_weight_backward_fits(node):
    a = node.attrs
    return (len(a["dimension_numbers"][0]) == 4 and _ones(a["lhs_dilation"])
            and a["batch_group_count"] == 1 and node.out.dtype.kind == "f"
            and (_ones(a["window_strides"]) or _ones(a["rhs_dilation"])))


def _perm(ctx, t, perm):
    perm = [int(p) for p in perm]
    return t if perm == sorted(perm) else ctx.mb.transpose(x=t, perm=ctx.ints(perm))


def _edges(ctx, x, shape, pads):
    """Applies (lo, hi) padding of the two trailing axes of NCHW `x`: negative crops (slice),
    positive is returned for the convolution's own padding. Returns (x, conv pads)."""
    start, limit = [0, 0, 0, 0], list(shape)
    for r, (lo, hi) in enumerate(pads):
        start[2 + r], limit[2 + r] = max(-lo, 0), shape[2 + r] - max(-hi, 0)
    if any(start) or limit != list(shape):
        x = slice_(ctx, x, start, limit)
    return x, ctx.ints([max(p, 0) for pair in pads for p in pair])


def _swap_io(ctx, w, cout, cin_g, g, kh, kw):
    """[Cout, Cin/g, kh, kw] -> [Cin, Cout/g, kh, kw] (the same groups, roles swapped)."""
    mb = ctx.mb
    if g == 1:
        return mb.transpose(x=w, perm=ctx.ints([1, 0, 2, 3]))
    w = mb.reshape(x=w, shape=ctx.ints([g, cout // g, cin_g, kh, kw]))
    w = mb.transpose(x=w, perm=ctx.ints([0, 2, 1, 3, 4]))
    return mb.reshape(x=w, shape=ctx.ints([cin_g * g, cout // g, kh, kw]))


@mil_rule(K.Conv2dBackwardInput, claim=NATIVE_BACKWARD, when=conv_input_backward_fits)
def _conv_backward_input(ctx, node, dy, w):
    """Constant weights: MIL conv_transpose (the adjoint of conv), the forward padding cut from
    its output. Run-time weights: a stride-1 conv of dy (zero-interleaved by the stride) with the
    kernel flipped and its in/out channels swapped. Input rows no window read get zeros."""
    if not conv_input_backward_fits(node):
        refuse(node, "input dilation, batch groups, or kernel dilation with a run-time kernel",
               "legalize with the backend's claims (kept_kinds), which decompose this node")
    a, mb = node.attrs, ctx.mb
    lhs, rhs, out = a["dimension_numbers"]
    in_shape, w_shape, dy_shape = a["input_shape"], node.inputs[1].shape, node.inputs[0].shape
    g = a["feature_group_count"]
    dy_n, w_n = _perm(ctx, dy, out), _perm(ctx, w, rhs)
    cout, cin_g, kh, kw = (w_shape[d] for d in rhs)
    sizes = [(in_shape[lhs[2 + r]], dy_shape[out[2 + r]], (kh, kw)[r]) for r in range(2)]
    if w.val is not None:
        crop, grow = [], []
        for (n, ho, kk), s, d, (lo, hi) in zip(sizes, a["window_strides"], a["rhs_dilation"],
                                              a["padding"]):
            end = (ho - 1) * s + d * (kk - 1) + 1 - (n + lo)   # surplus (> 0) / missing rows
            crop += [max(lo, 0), max(end, 0)]
            grow += [max(-lo, 0), max(-end, 0)]
        dx = mb.conv_transpose(x=dy_n, weight=w_n, pad_type="custom", pad=ctx.ints(crop),
                               strides=ctx.ints(a["window_strides"]),
                               dilations=ctx.ints(a["rhs_dilation"]), groups=g)
        if any(grow):
            dx = mb.pad(x=dx, pad=ctx.ints([0, 0, 0, 0] + grow), mode="constant",
                        constant_val=ctx.like(0, dx))
        return _perm(ctx, dx, np.argsort(lhs))
    shape = (dy_shape[out[0]], cout, sizes[0][1], sizes[1][1])
    dtype = ctx.np_dtype(dy_n)
    for r, s in enumerate(a["window_strides"]):
        if s > 1 and shape[2 + r] > 1:
            dy_n, shape = pad_interior(ctx, dy_n, shape, 2 + r, s - 1, 0, dtype)
    pads = []
    for r, ((n, ho, kk), (lo, hi)) in enumerate(zip(sizes, a["padding"])):
        pl = kk - 1 - lo
        pads.append((pl, n - shape[2 + r] - pl + kk - 1))
    dy_n, conv_pads = _edges(ctx, dy_n, shape, pads)
    wt = _swap_io(ctx, mb.reverse(x=w_n, axes=ctx.ints([2, 3])), cout, cin_g, g, kh, kw)
    dx = mb.conv(x=dy_n, weight=wt, pad_type="custom", pad=conv_pads, groups=g)
    return _perm(ctx, dx, np.argsort(lhs))


def _weight_layout(ctx, x, a, shape):
    """x -> [Cin/g, g·N, H, W]: input channels become the batch, the batch becomes channels
    (grouped by feature group)."""
    mb = ctx.mb
    lhs, g = a["dimension_numbers"][0], a["feature_group_count"]
    n, cin, h, w = (shape[d] for d in lhs)
    if g == 1:
        return _perm(ctx, x, [lhs[1], lhs[0], lhs[2], lhs[3]])
    x = mb.reshape(x=_perm(ctx, x, lhs), shape=ctx.ints([n, g, cin // g, h, w]))
    x = mb.transpose(x=x, perm=ctx.ints([2, 1, 0, 3, 4]))
    return mb.reshape(x=x, shape=ctx.ints([cin // g, g * n, h, w]))


@mil_rule(K.Conv2dBackwardWeight, claim=NATIVE_BACKWARD, when=conv_weight_backward_fits)
def _conv_backward_weight(ctx, node, x, dy):
    """dw[o, i, a, b] = Σ_n,h,w dy[n, o, h, w]·xp[n, i, h·s + a·d, w·s + b·d]: a convolution of x
    laid out [Cin/g, g·N, H, W] with dy laid out [Cout, N, Ho, Wo] as its (run-time) kernel.
    Stride 1: one conv with stride d. Stride s > 1 (d = 1): kernel tap a = q·s + r reads the
    phase xp[r::s], so each phase (r_h, r_w) is a stride-1 conv giving taps q, and the phases
    are interleaved back (O(s_h·s_w) ops, none growing with the tensors)."""
    if not conv_weight_backward_fits(node):
        refuse(node, "input dilation, batch groups, or both strides and kernel dilation",
               "legalize with the backend's claims (kept_kinds), which decompose this node")
    a, mb = node.attrs, ctx.mb
    lhs, rhs, out = a["dimension_numbers"]
    g = a["feature_group_count"]
    xs = node.inputs[0].shape
    n, cin, h, w = (xs[d] for d in lhs)
    ws = a["weight_shape"]
    cout, kh, kw = ws[rhs[0]], ws[rhs[2]], ws[rhs[3]]
    xt = _weight_layout(ctx, x, a, xs)
    kern = _perm(ctx, dy, [out[1], out[0], out[2], out[3]])
    shape = [cin // g, g * n, h, w]
    sh, sw = a["window_strides"]
    if sh == sw == 1:
        xt, pads = _edges(ctx, xt, shape, a["padding"])
        y = mb.conv(x=xt, weight=kern, strides=ctx.ints(a["rhs_dilation"]), pad_type="custom",
                    pad=pads, groups=g)
        if tuple(y.shape[2:]) != (kh, kw):
            y = slice_(ctx, y, [0, 0, 0, 0], [cin // g, cout, kh, kw])
    else:
        y = _strided_weight_grad(ctx, node, xt, kern, shape, cout, (kh, kw), (sh, sw))
    # y is [Cin/g, Cout, kh, kw]; the result R satisfies R.transpose(rhs) == [Cout, Cin/g, kh, kw]
    to_oihw = [1, 0, 2, 3]
    return _perm(ctx, y, [to_oihw[i] for i in np.argsort(rhs)])


def _strided_weight_grad(ctx, node, xt, kern, shape, cout, ks, strides):
    mb, a = ctx.mb, node.attrs
    xt, pads = _edges(ctx, xt, shape, a["padding"])
    pads = [int(p) for p in pads]
    if any(pads):
        xt = mb.pad(x=xt, pad=ctx.ints([0, 0, 0, 0] + pads), mode="constant",
                    constant_val=ctx.like(0, xt))
    hp, wp = (shape[2 + r] - max(-lo, 0) - max(-hi, 0) + pads[2 * r] + pads[2 * r + 1]
              for r, (lo, hi) in enumerate(a["padding"]))
    io = shape[0] * cout
    q = [-(-k // s) for k, s in zip(ks, strides)]            # taps per phase, rounded up
    dtype = ctx.np_dtype(xt)
    rows = []
    for rh in range(strides[0]):
        cols = []
        for rw in range(strides[1]):
            nq = (len(range(rh, ks[0], strides[0])), len(range(rw, ks[1], strides[1])))
            if 0 in nq:
                cols.append(ctx.const(np.zeros((io, q[0], 1, q[1], 1), dtype)))
                continue
            ph = slice_(ctx, xt, [0, 0, rh, rw], [shape[0], shape[1], hp, wp],
                        [1, 1, strides[0], strides[1]])
            y = mb.conv(x=ph, weight=kern, pad_type="valid", groups=a["feature_group_count"])
            y = slice_(ctx, y, [0, 0, 0, 0], [shape[0], cout, nq[0], nq[1]])
            if nq != tuple(q):
                y = mb.pad(x=y, pad=ctx.ints([0, 0, 0, 0, 0, q[0] - nq[0], 0, q[1] - nq[1]]),
                           mode="constant", constant_val=ctx.like(0, y))
            cols.append(mb.reshape(x=y, shape=ctx.ints([io, q[0], 1, q[1], 1])))
        rows.append(cols[0] if len(cols) == 1 else mb.concat(values=cols, axis=4))
    y = rows[0] if len(rows) == 1 else mb.concat(values=rows, axis=2)
    y = mb.reshape(x=y, shape=ctx.ints([io, q[0] * strides[0], q[1] * strides[1]]))
    if q[0] * strides[0] != ks[0] or q[1] * strides[1] != ks[1]:
        y = slice_(ctx, y, [0, 0, 0], [io, ks[0], ks[1]])
    return mb.reshape(x=y, shape=ctx.ints([shape[0], cout, ks[0], ks[1]]))
