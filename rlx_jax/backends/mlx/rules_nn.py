"""Native MLX rules for the high-level forward kinds and the backward kinds (semantics:
docs/high-level-kinds.md). mx.fast kernels where their semantics match (layer_norm, rms_norm,
scaled_dot_product_attention), MLX's own VJPs of those kernels for the input gradients, and
short MLX compositions elsewhere."""
import mlx.core as mx
import numpy as np

from ...ir.ops import OpKind as K
from ...tables import NATIVE_BACKWARD
from .rules_conv import convolve, select_and_scatter_add
from .rules_reduce import accumulated
from .rules_elementwise import UNARY
from .table import mlx_rule, out_dtype, scalar


def _vjp(fn, primal, cotangent):
    return mx.vjp(fn, [primal], [cotangent])[1][0]


def _rows(x):
    """Sum over every axis but the last."""
    return mx.sum(x, axis=list(range(x.ndim - 1))) if x.ndim > 1 else x


def _xhat(x, eps):
    m = mx.mean(x, axis=-1, keepdims=True)
    xc = x - m
    return xc * mx.rsqrt(mx.mean(xc * xc, axis=-1, keepdims=True) + eps)


# ---- forward ----
mlx_rule(K.Softmax)(lambda ctx, node, x: mx.softmax(x, axis=node.attrs["axis"], precise=True))
mlx_rule(K.LogSoftmax)(lambda ctx, node, x: x - mx.logsumexp(x, axis=node.attrs["axis"],
                                                             keepdims=True))
mlx_rule(K.LayerNorm)(lambda ctx, node, x, g, b: mx.fast.layer_norm(x, g, b, node.attrs["eps"]))


@mlx_rule(K.RmsNorm)
def _rms_norm(ctx, node, x, gamma, *beta):
    y = mx.fast.rms_norm(x, gamma, node.attrs["eps"])
    return y + beta[0] if beta else y


def _grouped(x, groups):
    return x.reshape(x.shape[0], -1, groups, x.shape[-1] // groups)


def _gn_hat(x, groups, eps):
    g = _grouped(x, groups)
    m = mx.mean(g, axis=(1, 3), keepdims=True)
    gc = g - m
    r = mx.rsqrt(mx.mean(gc * gc, axis=(1, 3), keepdims=True) + eps)
    return gc * r, r


@mlx_rule(K.GroupNorm)
def _group_norm(ctx, node, x, gamma, beta):
    a = node.attrs
    xhat, _ = _gn_hat(x, a["num_groups"], a["eps"])
    return xhat.reshape(x.shape) * gamma + beta


def _mask_bias(node, q, k, mask):
    """Additive mask [.., Sq, Sk] (finfo.min where masked, as the decomposition) or None."""
    a = node.attrs
    low = scalar(float(np.finfo(np.float32 if q.dtype == mx.float32 else np.float16).min)
                 if q.dtype != mx.bfloat16 else -3.3895e38, q.dtype)
    bias = None
    if a["mask_kind"] == "additive":
        bias = mask.astype(q.dtype)
    elif a["mask_kind"] == "bool":
        bias = mx.where(mask, scalar(0, q.dtype), low)
    if a["causal"]:
        sq, sk = q.shape[2], k.shape[2]
        keep = mx.arange(sk)[None, :] <= mx.arange(sq)[:, None]
        bias = mx.where(keep, scalar(0, q.dtype) if bias is None else bias, low)
    return bias


def _bhsd(t, layout):
    return t if layout == "BHSD" else mx.transpose(t, (0, 2, 1, 3))


def _attention(node, q, k, v, mask):
    lay = node.attrs["layout"]
    q, k, v = _bhsd(q, lay), _bhsd(k, lay), _bhsd(v, lay)
    bias = _mask_bias(node, q, k, mask)
    o = mx.fast.scaled_dot_product_attention(q, k, v, scale=float(node.attrs["scale"]),
                                             mask=bias)
    return _bhsd(o, lay)


@mlx_rule(K.Attention)
def _attention_rule(ctx, node, q, k, v, *mask):
    return _attention(node, q, k, v, mask[0] if mask else None)


def _rope_tables(x, cos, sin, traditional, seq_axis):
    """The composition of nn/rotary.py's formula for runtime tables [S, D/2] or [S, D]."""
    h, lift = x.shape[-1] // 2, (1,) * (-seq_axis - 2)
    cos, sin = (t.reshape(t.shape[:1] + lift + t.shape[1:]) if t.ndim == 2 else t
                for t in (cos, sin))
    if traditional:
        x1, x2 = x[..., ::2], x[..., 1::2]
        return mx.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)
    x1, x2 = x[..., :h], x[..., h:]
    if cos.shape[-1] != h:                       # full width: x·cos + rotate_half(x)·sin
        return x * cos + mx.concatenate([-x2, x1], axis=-1) * sin
    return mx.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rope_fast(x, inv_freq, traditional, seq_axis, sign):
    """mx.fast.rope at positions arange(S) (scale -1: the negated angles of the backward); it
    takes x[B, ..., S, D] of rank >= 3 and the frequencies as periods 1/inv_freq."""
    shape, y = x.shape, mx.swapaxes(x, seq_axis, -2) if seq_axis != -2 else x
    moved = y.shape
    if y.ndim < 3:
        y = y.reshape((1,) * (3 - y.ndim) + moved)
    y = mx.fast.rope(y, shape[-1], traditional=traditional, base=None, scale=sign, offset=0,
                     freqs=mx.reciprocal(inv_freq)).reshape(moved)
    return mx.swapaxes(y, seq_axis, -2) if seq_axis != -2 else y


def _rope(node, x, tables, sign):
    a = node.attrs
    if len(tables) == 1:
        return _rope_fast(x, tables[0], a["traditional"], a["seq_axis"], sign)
    cos, sin = tables
    if sign < 0 and cos.shape[-1] != x.shape[-1] // 2:     # nn/rotary.py rope_backward_ref
        h = x.shape[-1] // 2
        sin = mx.concatenate([sin[..., h:], sin[..., :h]], axis=-1)
    return _rope_tables(x, cos, sin if sign > 0 else -sin, a["traditional"], a["seq_axis"])


mlx_rule(K.Rope)(lambda ctx, node, x, *tables: _rope(node, x, tables, 1.0))


@mlx_rule(K.AdaLayerNorm)
def _ada_layer_norm(ctx, node, x, shift, scale):
    xhat = mx.fast.layer_norm(x, None, None, node.attrs["eps"])
    return xhat * (1 + scale[:, None]) + shift[:, None]


mlx_rule(K.GatedResidual)(lambda ctx, node, x, gate, y: x + gate[:, None] * y)


@mlx_rule(K.LoraMatMul)
def _lora_matmul(ctx, node, x, w, a, b):
    """x·W + (x·A·B)·scale: three matmuls (the rank-R product first) and one fused add."""
    low = mx.matmul(mx.matmul(x, a), b)
    scale = node.attrs["scale"]
    return mx.matmul(x, w) + (low if scale == 1.0 else low * scale)


@mlx_rule(K.SoftmaxCrossEntropyWithLogits)
def _sce(ctx, node, logits, labels):
    lse = mx.logsumexp(logits, axis=1)
    picked = mx.take_along_axis(logits, labels.astype(mx.int32)[:, None], axis=1)[:, 0]
    return lse - picked


# ---- backward ----
mlx_rule(K.ReluBackward, claim=NATIVE_BACKWARD)(
    lambda ctx, node, x, dy: mx.where(x > 0, dy, scalar(0, dy.dtype)))


@mlx_rule(K.ActivationBackward, claim=NATIVE_BACKWARD)
def _activation_backward(ctx, node, x, dy):
    return _vjp(UNARY[node.attrs["fn"]], x, dy)


@mlx_rule(K.LayerNormBackwardInput, claim=NATIVE_BACKWARD)
def _ln_backward_input(ctx, node, x, gamma, dy):
    eps = node.attrs["eps"]
    return _vjp(lambda t: mx.fast.layer_norm(t, gamma, None, eps), x, dy)


mlx_rule(K.LayerNormBackwardGamma, claim=NATIVE_BACKWARD)(
    lambda ctx, node, x, dy: _rows(dy * _xhat(x, node.attrs["eps"])))


@mlx_rule(K.RmsNormBackwardInput, claim=NATIVE_BACKWARD)
def _rms_backward_input(ctx, node, x, gamma, dy):
    eps = node.attrs["eps"]
    return _vjp(lambda t: mx.fast.rms_norm(t, gamma, eps), x, dy)


@mlx_rule(K.RmsNormBackwardGamma, claim=NATIVE_BACKWARD)
def _rms_backward_gamma(ctx, node, x, dy):
    r = mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + node.attrs["eps"])
    return _rows(dy * x * r)


mlx_rule(K.RmsNormBackwardBeta, K.GroupNormBackwardBeta, claim=NATIVE_BACKWARD)(
    lambda ctx, node, dy: _rows(dy))


@mlx_rule(K.GroupNormBackwardInput, claim=NATIVE_BACKWARD)
def _gn_backward_input(ctx, node, x, gamma, dy):
    a = node.attrs
    xhat, r = _gn_hat(x, a["num_groups"], a["eps"])
    g = _grouped(dy * gamma, a["num_groups"])
    t = g - mx.mean(g, axis=(1, 3), keepdims=True)
    t = t - xhat * mx.mean(g * xhat, axis=(1, 3), keepdims=True)
    return (r * t).reshape(x.shape)


@mlx_rule(K.GroupNormBackwardGamma, claim=NATIVE_BACKWARD)
def _gn_backward_gamma(ctx, node, x, dy):
    a = node.attrs
    xhat, _ = _gn_hat(x, a["num_groups"], a["eps"])
    return _rows(dy * xhat.reshape(x.shape))


@mlx_rule(K.AttentionBackward, claim=NATIVE_BACKWARD)
def _attention_backward(ctx, node, q, k, v, *rest):
    mask, dout = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    _, grads = mx.vjp(lambda a, b, c: _attention(node, a, b, c, mask), [q, k, v], [dout])
    return tuple(grads)


mlx_rule(K.RopeBackward, claim=NATIVE_BACKWARD)(
    lambda ctx, node, dy, *tables: _rope(node, dy, tables, -1.0))


@mlx_rule(K.SoftmaxCrossEntropyBackward, claim=NATIVE_BACKWARD)
def _sce_backward(ctx, node, logits, labels, dloss):
    p = mx.softmax(logits, axis=1, precise=True)
    hot = mx.arange(logits.shape[1])[None, :] == labels.astype(mx.int32)[:, None]
    return (p - hot.astype(p.dtype)) * dloss[:, None]


@mlx_rule(K.AdaLayerNormBackward, claim=NATIVE_BACKWARD)
def _ada_backward(ctx, node, x, scale, dy):
    eps = node.attrs["eps"]
    xhat = _xhat(x, eps)
    dx = _vjp(lambda t: mx.fast.layer_norm(t, None, None, eps), x, dy * (1 + scale[:, None]))
    return dx, mx.sum(dy, axis=1), mx.sum(dy * xhat, axis=1)


mlx_rule(K.GatedResidualBackward, claim=NATIVE_BACKWARD)(
    lambda ctx, node, gate, y, dout: (mx.sum(dout * y, axis=1), gate[:, None] * dout))


@mlx_rule(K.Conv2dBackwardInput, claim=NATIVE_BACKWARD)
def _conv_backward_input(ctx, node, dy, w):
    x0 = mx.zeros(tuple(node.attrs["input_shape"]), out_dtype(node))
    return _vjp(lambda x: convolve(ctx, node, x, w), x0, dy)


@mlx_rule(K.Conv2dBackwardWeight, claim=NATIVE_BACKWARD)
def _conv_backward_weight(ctx, node, x, dy):
    """MLX's conv VJP mis-sizes the weight gradient when input dilation meets strides and
    uneven padding (mlx 0.32.4: a (1,3,1,1) kernel gets a (1,2,1,1) gradient). MLX sizes arrays
    when it builds the graph, so that is seen here, before anything runs; the gradient is then
    taken through the patches form of the convolution (explicit padding and dilation)."""
    shape = tuple(node.attrs["weight_shape"])
    w0 = mx.zeros(shape, out_dtype(node))
    dw = _vjp(lambda w: convolve(ctx, node, x, w), w0, dy)
    if tuple(dw.shape) != shape:
        dw = _vjp(lambda w: convolve(ctx, node, x, w, patches=True), w0, dy)
    return dw


@mlx_rule(K.MaxPool2dBackward, claim=NATIVE_BACKWARD)
def _max_pool_backward(ctx, node, x, dy):
    a = node.attrs
    return select_and_scatter_add(dy, x, "ge", a["window_dimensions"], a["window_strides"],
                                  a["padding"])


mlx_rule(K.CumsumBackward, claim=NATIVE_BACKWARD)(lambda ctx, node, dy: mx.cumsum(
    accumulated(dy), axis=node.attrs["axis"], reverse=not node.attrs["reverse"]).astype(dy.dtype))


@mlx_rule(K.GatherBackward, claim=NATIVE_BACKWARD)
def _gather_backward(ctx, node, dy, indices):
    """Scatter-add of dy's slices into zeros[num, ...]; out-of-bounds rows are dropped
    (clamped in mode clip), through one spare row."""
    num = node.attrs["num"]
    idx = indices.reshape(-1).astype(mx.int32)
    if node.attrs["mode"] == "clip":
        idx = mx.clip(idx, 0, num - 1)
    else:
        idx = mx.where((idx >= 0) & (idx < num), idx, scalar(num, mx.int32))
    slice_shape = dy.shape[indices.ndim:]
    table = mx.zeros((num + 1, *slice_shape), dy.dtype)
    return table.at[idx].add(dy.reshape(-1, *slice_shape))[:num]
