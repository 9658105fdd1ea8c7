"""Convolution (any dimension numbers, strides, padding incl. negative, lhs/rhs dilation, feature
and batch groups, zero-size dimensions) through MLX's channels-last `conv_general`, one call per
group for grouped 3-D convolutions; windowed reductions (Pool) and the max-pool derivatives
SelectAndScatterAdd / SelectAndGatherAdd through copied window views."""
import functools
import math

import jax
import mlx.core as mx
import numpy as np
from jax import lax

from ...errors import LoweringError
from ...ir.ops import OpKind as K
from .rules_shape import pad
from .table import (FLOATS, batched_matmul, highest, identity, index_dtype, lowest, mlx_rule,
                    out_dtype, scalar)


@mlx_rule(K.Conv)
def convolve(ctx, node, x, w, patches=False):
    """The Conv rule; the convolution backward rules (rules_nn.py) differentiate it. Results known
    statically never reach MLX's conv, which divides by the input feature count (none: SIGFPE),
    hands BLAS an empty weight matrix (no output features: the reference BLAS exits) and sizes an
    output with no room for a window by truncating division (a row of garbage). An empty result
    is empty; an empty contraction (no input features, windows over padding only) is zeros. The
    result is checked against the IR's shape. `patches=True` takes the patches form (explicit
    padding and dilation, then a contraction) even where MLX's conv would do."""
    a = node.attrs
    lhs_spec, rhs_spec, out_spec = a["dimension_numbers"]
    nsp = len(lhs_spec) - 2
    dt = out_dtype(node)
    shape = _result_shape(node, x, w)
    if x.size == 0 or w.size == 0 or math.prod(shape) == 0:
        return mx.zeros(shape, dt)
    x = mx.transpose(x.astype(dt), [lhs_spec[0], *lhs_spec[2:], lhs_spec[1]])   # N, S..., C
    w = mx.transpose(w.astype(dt), [rhs_spec[0], *rhs_spec[2:], rhs_spec[1]])   # O, S..., I
    groups, bgc = a["feature_group_count"], a["batch_group_count"]
    if bgc > 1:                      # batch groups -> feature groups: [N, ..., C] -> [N/g, ..., gC]
        n = x.shape[0] // bgc
        x = mx.moveaxis(x.reshape(bgc, n, *x.shape[1:]), 0, -2)
        x = x.reshape(*x.shape[:-2], -1)
        groups = bgc
    padding = list(a["padding"])
    lhs_dil = list(a["lhs_dilation"])
    if patches or dt not in FLOATS or not 1 <= nsp <= 3:   # MLX convolves floats in 1-3 dims
        out = _conv_by_patches(x, w, a["window_strides"], padding, lhs_dil, a["rhs_dilation"],
                               groups, dt)
        return _checked(node, _to_out_spec(out, out_spec), shape)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        if any(d != 1 for d in lhs_dil):
            zero = scalar(0, dt)
            x = pad(x, zero, [(0, 0, 0)] + [(0, 0, d - 1) for d in lhs_dil] + [(0, 0, 0)])
            lhs_dil = [1] * nsp
        x = x[(slice(None),) + tuple(slice(max(-lo, 0), x.shape[1 + i] - max(-hi, 0))
                                     for i, (lo, hi) in enumerate(padding))]
        padding = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
        if x.size == 0:                           # cropped away: every window is padding
            return mx.zeros(shape, dt)
    conv = functools.partial(
        mx.conv_general, stride=list(a["window_strides"]),
        padding=([lo for lo, _ in padding], [hi for _, hi in padding]),
        kernel_dilation=list(a["rhs_dilation"]), input_dilation=lhs_dil)
    if groups > 1 and nsp == 3:          # MLX groups 1-D and 2-D convs only: one per group
        xs = mx.split(x, groups, axis=-1)
        ws = mx.split(w, groups, axis=0)
        out = mx.concatenate([conv(xg, wg) for xg, wg in zip(xs, ws)], axis=-1)
    else:
        out = conv(x, w, groups=groups)
    return _checked(node, _to_out_spec(out, out_spec), shape)


def _result_shape(node, x, w):
    """The convolution's result shape: a Conv node's own type; the conv backward kinds run this
    rule under a vjp on their own node, so for them it is JAX's shape of the forward conv."""
    if node.kind is K.Conv:
        return node.out.shape
    a = node.attrs
    conv = functools.partial(
        lax.conv_general_dilated, window_strides=a["window_strides"], padding=a["padding"],
        lhs_dilation=a["lhs_dilation"], rhs_dilation=a["rhs_dilation"],
        dimension_numbers=lax.ConvDimensionNumbers(*a["dimension_numbers"]),
        feature_group_count=a["feature_group_count"], batch_group_count=a["batch_group_count"])
    return jax.eval_shape(conv, *[jax.ShapeDtypeStruct(v.shape, np.float32) for v in (x, w)]).shape


def _checked(node, out, shape=None):
    """The IR's type (the node's, or `shape`) is the truth; a rule that disagrees with it is a
    bug, not a result."""
    shape = node.out.shape if shape is None else tuple(shape)
    if tuple(out.shape) != shape:
        raise LoweringError(f"backend 'mlx' computed shape {tuple(out.shape)} for "
                            f"{node.kind.name}, expected {shape}")
    return out


def _to_out_spec(out, out_spec):
    """[N, S..., O] (MLX's layout) -> the layout of the output dimension numbers."""
    nsp = out.ndim - 2
    perm = [0] * (nsp + 2)
    perm[out_spec[0]], perm[out_spec[1]] = 0, nsp + 1
    for i, p in enumerate(out_spec[2:]):
        perm[p] = 1 + i
    return mx.transpose(out, perm)


def _conv_by_patches(x, w, strides, padding, lhs_dil, rhs_dil, groups, dt):
    """Convolution as patches (a strided window view) contracted per feature group: exact,
    wrapping integer convolutions (MLX convolves floats only) and any number of spatial dims."""
    cfg = [(0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dil)] + [(0, 0, 0)]
    xp = pad(x.astype(dt), scalar(0, dt), cfg)
    ks, c = list(w.shape[1:-1]), x.shape[-1]
    win, out = windows(xp, [1, *ks, c], [1, *strides, 1], [1, *rhs_dil, 1])
    n, p, kp = x.shape[0], math.prod(out[1:-1]), math.prod(ks)
    patches = win.reshape(n * p, kp, groups, c // groups)
    og = w.shape[0] // groups
    wg = w.astype(dt).reshape(groups, og, kp, c // groups)
    res = []
    for g in range(groups):
        lhs = patches[:, :, g, :].reshape(1, n * p, -1)
        rhs = mx.transpose(wg[g].reshape(og, -1), (1, 0))[None]
        res.append(batched_matmul(lhs, rhs, dt)[0])
    y = mx.concatenate(res, axis=-1) if groups > 1 else res[0]
    return y.reshape(n, *out[1:-1], w.shape[0])


def windows(x, window, strides, dilation):
    """Every window position of x (already padded) as [out..., window...]. Built as a strided
    view, then copied: MLX's as_strided needs a row-contiguous source (a cropped pad is not),
    and its reductions misread a view whose windows overlap or skip (dilated windows summed
    wrong values)."""
    x = mx.contiguous(x)
    out = [max((d - (k - 1) * dl - 1) // s + 1, 0)
           for d, k, s, dl in zip(x.shape, window, strides, dilation)]
    el = [math.prod(x.shape[i + 1:]) for i in range(x.ndim)]
    st = [s * e for s, e in zip(strides, el)] + [dl * e for dl, e in zip(dilation, el)]
    return mx.contiguous(mx.as_strided(x, [*out, *window], st)), out


POOL = {"sum": mx.sum, "max": mx.max, "min": mx.min}


@mlx_rule(K.Pool)
def _pool(ctx, node, x):
    """Windowed reductions; an empty result (no room for a window) is known statically."""
    a = node.attrs
    if math.prod(node.out.shape) == 0:
        return mx.zeros(node.out.shape, x.dtype)
    fn = a["fn"]
    wd = a["window_dimensions"]
    if (x.dtype != mx.bool_ and tuple(a["window_strides"]) == tuple(wd)
            and all(p == (0, 0) for p in a["padding"]) and all(d % w == 0 for d, w in zip(
                x.shape, wd)) and set(a["base_dilation"]) | set(a["window_dilation"]) == {1}):
        tiles = x.reshape([v for d, w in zip(x.shape, wd) for v in (d // w, w)])
        return POOL[fn](tiles, axis=list(range(1, 2 * x.ndim, 2))).astype(x.dtype)
    init = scalar(identity(fn, x.dtype), x.dtype)
    xp = pad(x, init, [(lo, hi, b - 1) for (lo, hi), b in zip(a["padding"], a["base_dilation"])])
    win, out = windows(xp, a["window_dimensions"], a["window_strides"], a["window_dilation"])
    if x.dtype == mx.bool_:
        red = {"max": mx.any, "sum": mx.any, "min": mx.all}[fn]
        return red(win, axis=list(range(x.ndim, 2 * x.ndim)))
    r = POOL[fn](win, axis=list(range(x.ndim, 2 * x.ndim)))
    return _checked(node, r.astype(x.dtype))


def _selected(operand, prim, window, strides, padding, base_dilation, window_dilation):
    """Index (within the flattened window) that select `prim` picks in each window: the first
    maximum for ge, the first minimum for le. Returns (index, padded operand, out shape)."""
    if prim not in ("ge", "le"):
        raise NotImplementedError(f"select_prim {prim}")
    init = scalar(lowest(operand.dtype) if prim == "ge" else highest(operand.dtype),
                  operand.dtype)
    cfg = [(lo, hi, b - 1) for (lo, hi), b in zip(padding, base_dilation)]
    op = pad(operand, init, cfg)
    win, out = windows(op, window, strides, window_dilation)
    flat = win.reshape(*out, -1)
    sel = mx.argmax(flat, axis=-1) if prim == "ge" else mx.argmin(flat, axis=-1)
    return sel, cfg, out


@mlx_rule(K.SelectAndScatterAdd)
def _select_and_scatter_add(ctx, node, source, operand):
    a = node.attrs
    if source.size == 0:                          # no windows: nothing is scattered
        return mx.zeros(operand.shape, source.dtype)
    return select_and_scatter_add(source, operand, a["select_prim"], a["window_dimensions"],
                                  a["window_strides"], a["padding"])


def select_and_scatter_add(source, operand, prim, wd, ws, pd):
    """Max-pool backward: each window's source value is added at its first maximum."""
    nd = operand.ndim
    sel, cfg, out = _selected(operand, prim, wd, ws, pd, (1,) * nd, (1,) * nd)
    pshape = [d + lo + hi for d, (lo, hi) in zip(operand.shape, pd)]
    dt = index_dtype(math.prod(pshape))
    sel = sel.astype(dt)
    flat = None
    for d in range(nd):
        inner = math.prod(wd[d + 1:])
        w_d = (sel // inner) % wd[d] if inner > 1 else sel % wd[d]
        view = [1] * nd
        view[d] = out[d]
        o_d = mx.arange(out[d], dtype=dt).reshape(view) * ws[d]
        term = (o_d + w_d) * math.prod(pshape[d + 1:])
        flat = term if flat is None else flat + term
    acc = mx.zeros((math.prod(pshape),), source.dtype)
    acc = acc.at[flat.reshape(-1)].add(source.reshape(-1)).reshape(pshape)
    return acc[tuple(slice(lo, lo + d) for d, (lo, _) in zip(operand.shape, pd))]


@mlx_rule(K.SelectAndGatherAdd)
def _select_and_gather_add(ctx, node, tangents, operand):
    """Forward-mode max-pool: each window's tangent at the operand's first maximum."""
    a = node.attrs
    if math.prod(node.out.shape) == 0:
        return mx.zeros(node.out.shape, tangents.dtype)
    sel, cfg, out = _selected(operand, a["select_prim"], a["window_dimensions"],
                              a["window_strides"], a["padding"], a["base_dilation"],
                              a["window_dilation"])
    tp = pad(tangents, scalar(0, tangents.dtype), cfg)
    win, _ = windows(tp, a["window_dimensions"], a["window_strides"], a["window_dilation"])
    return mx.take_along_axis(win.reshape(*out, -1), sel[..., None], axis=-1)[..., 0]
