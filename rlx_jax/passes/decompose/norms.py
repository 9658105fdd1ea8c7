"""Decompositions of the normalizations (forward and backward) into primitive IR."""
from ...ir.ops import OpKind as K
from ...ir.reference import lora_matmul
from . import decomp
from .formulas import centered_grad, inline, lift, mean, normalize, rows_sum, vec


@decomp(K.LayerNorm)
def _layer_norm(b, node, x, gamma, beta):
    xhat, _ = normalize(b, x, node.attrs["eps"])
    return b.binary("add", b.binary("mul", xhat, vec(b, gamma, x.ndim)), vec(b, beta, x.ndim))


@decomp(K.LayerNormBackwardInput)
def _ln_backward_input(b, node, x, gamma, dy):
    xhat, r = normalize(b, x, node.attrs["eps"])
    return centered_grad(b, b.binary("mul", dy, vec(b, gamma, x.ndim)), xhat, r)


@decomp(K.LayerNormBackwardGamma)
def _ln_backward_gamma(b, node, x, dy):
    xhat, _ = normalize(b, x, node.attrs["eps"])
    return rows_sum(b, b.binary("mul", dy, xhat))


def _rms(b, x, eps):
    return b.unary("rsqrt", b.binary("add", mean(b, b.binary("mul", x, x), (-1,)),
                                     b.scalar(eps, x)))


@decomp(K.RmsNorm)
def _rms_norm(b, node, x, gamma, *beta):
    y = b.binary("mul", b.binary("mul", x, _rms(b, x, node.attrs["eps"])), vec(b, gamma, x.ndim))
    return b.binary("add", y, vec(b, beta[0], x.ndim)) if beta else y


@decomp(K.RmsNormBackwardInput)
def _rms_backward_input(b, node, x, gamma, dy):
    """dx = r·(g·dy) − x·r³·mean(x·g·dy)."""
    r = _rms(b, x, node.attrs["eps"])
    g = b.binary("mul", dy, vec(b, gamma, x.ndim))
    r3 = b.binary("mul", b.binary("mul", r, r), r)
    m = mean(b, b.binary("mul", x, g), (-1,))
    return b.binary("sub", b.binary("mul", r, g), b.binary("mul", b.binary("mul", x, r3), m))


@decomp(K.RmsNormBackwardGamma)
def _rms_backward_gamma(b, node, x, dy):
    r = _rms(b, x, node.attrs["eps"])
    return rows_sum(b, b.binary("mul", b.binary("mul", dy, x), r))


@decomp(K.RmsNormBackwardBeta, K.GroupNormBackwardBeta)
def _bias_backward(b, node, dy):
    return rows_sum(b, dy)


def _grouped(b, x, groups):
    return b.reshape(x, (x.shape[0], x.size // (x.shape[0] * x.shape[-1]), groups,
                         x.shape[-1] // groups))


@decomp(K.GroupNorm)
def _group_norm(b, node, x, gamma, beta):
    a = node.attrs
    xhat, _ = normalize(b, _grouped(b, x, a["num_groups"]), a["eps"], axes=(1, 3))
    y = b.binary("mul", b.reshape(xhat, x.shape), vec(b, gamma, x.ndim))
    return b.binary("add", y, vec(b, beta, x.ndim))


@decomp(K.GroupNormBackwardInput)
def _gn_backward_input(b, node, x, gamma, dy):
    a = node.attrs
    xhat, r = normalize(b, _grouped(b, x, a["num_groups"]), a["eps"], axes=(1, 3))
    g = _grouped(b, b.binary("mul", dy, vec(b, gamma, x.ndim)), a["num_groups"])
    return b.reshape(centered_grad(b, g, xhat, r, axes=(1, 3)), x.shape)


@decomp(K.GroupNormBackwardGamma)
def _gn_backward_gamma(b, node, x, dy):
    a = node.attrs
    xhat, _ = normalize(b, _grouped(b, x, a["num_groups"]), a["eps"], axes=(1, 3))
    return rows_sum(b, b.binary("mul", dy, b.reshape(xhat, x.shape)))


@decomp(K.AdaLayerNorm)
def _ada_layer_norm(b, node, x, shift, scale):
    xhat, _ = normalize(b, x, node.attrs["eps"])
    one_plus = b.binary("add", lift(b, scale, (0, 2), 3), b.scalar(1, x))
    return b.binary("add", b.binary("mul", xhat, one_plus), lift(b, shift, (0, 2), 3))


@decomp(K.AdaLayerNormBackward)
def _ada_backward(b, node, x, scale, dy):
    xhat, r = normalize(b, x, node.attrs["eps"])
    one_plus = b.binary("add", lift(b, scale, (0, 2), 3), b.scalar(1, x))
    dx = centered_grad(b, b.binary("mul", dy, one_plus), xhat, r)
    dshift = b.reduce("sum", dy, (1,))
    dscale = b.reduce("sum", b.binary("mul", dy, xhat), (1,))
    return dx, dshift, dscale


@decomp(K.GatedResidual)
def _gated_residual(b, node, x, gate, y):
    return b.binary("add", x, b.binary("mul", lift(b, gate, (0, 2), 3), y))


@decomp(K.GatedResidualBackward)
def _gated_backward(b, node, gate, y, dout):
    dgate = b.reduce("sum", b.binary("mul", dout, y), (1,))
    return dgate, b.binary("mul", lift(b, gate, (0, 2), 3), dout)


@decomp(K.LoraMatMul)
def _lora_matmul(b, node, x, w, a, bb):
    """Its three matmuls, the scale and the add (ir/reference.py's formula)."""
    return inline(b, lora_matmul, (x, w, a, bb), **node.attrs)
