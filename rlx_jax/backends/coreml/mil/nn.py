"""Native MIL kernels for the normalization kinds, forward and backward, and the small DiT ops
(docs/high-level-kinds.md is the contract; the decompositions in passes/decompose/norms.py are
the oracle they are tested against).

Kernels are hand-composed with MIL's implicit (numpy) broadcasting: parameter vectors [D] and
per-row statistics kept as [..., 1] broadcast without Expand/reshape nodes, and MIL's `rsqrt`
takes the epsilon itself. Op counts (MIL ops, constants excluded):

  RmsNorm 5 (+1 beta)        RmsNormBackwardInput 11   RmsNormBackwardGamma 6   ...Beta 1
  LayerNorm 1-3              LayerNormBackwardInput 14 LayerNormBackwardGamma 3
  GroupNorm 10               GroupNormBackwardInput 17 GroupNormBackwardGamma 10 ...Beta 1
  AdaLayerNorm 6             AdaLayerNormBackward 19   GatedResidual 3  GatedResidualBackward 4
"""
from ....ir.ops import OpKind as K
from ....tables import NATIVE_BACKWARD
from .table import MIL_RULES, mil_rule

# Backward kinds with no MIL kernel by design: their decomposition is already the minimal MIL
# (dy·f'(x), a reversed cumsum, a scatter-add). RopeBackward's kernel is in nn_attn.py.
MIL_RULES.decomposed(K.ReluBackward, K.ActivationBackward, K.CumsumBackward, K.GatherBackward)


# ---- shared pieces ----
def mean(ctx, x, axes=(-1,)):
    """Mean over `axes`, kept as size-1 axes (1 op)."""
    return ctx.mb.reduce_mean(x=x, axes=ctx.ints(axes), keep_dims=True)


def rows_sum(ctx, x, ndim, keep=1):
    """Sum over every axis but the last `keep` (a parameter gradient; 1 op)."""
    axes = list(range(ndim - keep))
    if not axes:
        return x
    return ctx.mb.reduce_sum(x=x, axes=ctx.ints(axes), keep_dims=False)


def rms_r(ctx, x, eps):
    """r = rsqrt(mean(x²) + eps) as [..., 1] (3 ops)."""
    mb = ctx.mb
    return mb.rsqrt(x=mean(ctx, mb.mul(x=x, y=x)), epsilon=ctx.like(eps, x))


def stats(ctx, x, eps, axes=(-1,)):
    """(xhat, r): xhat = (x - mean)·r, r = rsqrt(var + eps), biased variance (6 ops)."""
    mb = ctx.mb
    xc = mb.sub(x=x, y=mean(ctx, x, axes))
    r = mb.rsqrt(x=mean(ctx, mb.mul(x=xc, y=xc), axes), epsilon=ctx.like(eps, x))
    return mb.mul(x=xc, y=r), r


def centered(ctx, g, xhat, r, axes=(-1,)):
    """r·(g − mean(g) − xhat·mean(g·xhat)): a normalization's input gradient (7 ops)."""
    mb = ctx.mb
    t = mb.sub(x=g, y=mean(ctx, g, axes))
    t = mb.sub(x=t, y=mb.mul(x=xhat, y=mean(ctx, mb.mul(x=g, y=xhat), axes)))
    return mb.mul(x=r, y=t)


def plain_ln(ctx, x, eps):
    """xhat of the last axis with MIL's own layer_norm (no affine; 1 op)."""
    return ctx.mb.layer_norm(x=x, axes=ctx.ints([-1]), epsilon=ctx.like(eps, x))


def per_sample(ctx, v):
    """[B, D] -> [B, 1, D], broadcasting against x[B, S, D] (1 op)."""
    return ctx.mb.expand_dims(x=v, axes=ctx.ints([1]))


# ---- Softmax ----
mil_rule(K.Softmax)(lambda ctx, node, x: ctx.mb.softmax(x=x, axis=node.attrs["axis"]))


@mil_rule(K.LogSoftmax)
def _log_softmax(ctx, node, x):
    """(x - max) - logsumexp(x - max): 4 ops (MIL has no log_softmax)."""
    mb, axes = ctx.mb, ctx.ints([node.attrs["axis"]])
    shifted = mb.sub(x=x, y=mb.reduce_max(x=x, axes=axes, keep_dims=True))
    return mb.sub(x=shifted, y=mb.reduce_log_sum_exp(x=shifted, axes=axes, keep_dims=True))


# ---- LayerNorm ----
@mil_rule(K.LayerNorm)
def _layer_norm(ctx, node, x, gamma, beta):
    """MIL layer_norm; its gamma/beta must be constants, so runtime parameters are applied
    after it (1 op with constant parameters, 3 otherwise)."""
    mb, eps = ctx.mb, ctx.like(node.attrs["eps"], x)
    if gamma.val is not None and beta.val is not None:
        return mb.layer_norm(x=x, axes=ctx.ints([-1]), gamma=gamma, beta=beta, epsilon=eps)
    return mb.add(x=mb.mul(x=plain_ln(ctx, x, node.attrs["eps"]), y=gamma), y=beta)


@mil_rule(K.LayerNormBackwardInput, claim=NATIVE_BACKWARD)
def _ln_backward_input(ctx, node, x, gamma, dy):
    xhat, r = stats(ctx, x, node.attrs["eps"])
    return centered(ctx, ctx.mb.mul(x=dy, y=gamma), xhat, r)


@mil_rule(K.LayerNormBackwardGamma, claim=NATIVE_BACKWARD)
def _ln_backward_gamma(ctx, node, x, dy):
    xhat = plain_ln(ctx, x, node.attrs["eps"])
    return rows_sum(ctx, ctx.mb.mul(x=dy, y=xhat), len(node.inputs[0].shape))


# ---- RmsNorm ----
@mil_rule(K.RmsNorm)
def _rms_norm(ctx, node, x, gamma, *beta):
    mb = ctx.mb
    y = mb.mul(x=mb.mul(x=x, y=rms_r(ctx, x, node.attrs["eps"])), y=gamma)
    return mb.add(x=y, y=beta[0]) if beta else y


@mil_rule(K.RmsNormBackwardInput, claim=NATIVE_BACKWARD)
def _rms_backward_input(ctx, node, x, gamma, dy):
    """dx = r·(g − x·r²·mean(x·g)), g = dy·gamma: 11 MIL ops."""
    mb = ctx.mb
    g = mb.mul(x=dy, y=gamma)
    r = rms_r(ctx, x, node.attrs["eps"])
    m = mean(ctx, mb.mul(x=x, y=g))
    coef = mb.mul(x=mb.mul(x=r, y=r), y=m)                # [..., 1]
    return mb.mul(x=r, y=mb.sub(x=g, y=mb.mul(x=x, y=coef)))


@mil_rule(K.RmsNormBackwardGamma, claim=NATIVE_BACKWARD)
def _rms_backward_gamma(ctx, node, x, dy):
    mb = ctx.mb
    xr = mb.mul(x=x, y=rms_r(ctx, x, node.attrs["eps"]))
    return rows_sum(ctx, mb.mul(x=dy, y=xr), len(node.inputs[0].shape))


@mil_rule(K.RmsNormBackwardBeta, K.GroupNormBackwardBeta, claim=NATIVE_BACKWARD)
def _bias_backward(ctx, node, dy):
    return rows_sum(ctx, dy, len(node.inputs[0].shape))


# ---- GroupNorm (channels last: x[N, ..., C], statistics over axes 1 and 3 of [N, S, G, C/G]) --
GROUP_AXES = (1, 3)


def grouped(ctx, x, shape, groups):
    n, c = shape[0], shape[-1]
    s = 1
    for d in shape[1:-1]:
        s *= d
    return ctx.mb.reshape(x=x, shape=ctx.ints([n, s, groups, c // groups]))


@mil_rule(K.GroupNorm)
def _group_norm(ctx, node, x, gamma, beta):
    a, shape, mb = node.attrs, node.inputs[0].shape, ctx.mb
    xhat, _ = stats(ctx, grouped(ctx, x, shape, a["num_groups"]), a["eps"], GROUP_AXES)
    y = mb.mul(x=mb.reshape(x=xhat, shape=ctx.ints(shape)), y=gamma)
    return mb.add(x=y, y=beta)


@mil_rule(K.GroupNormBackwardInput, claim=NATIVE_BACKWARD)
def _gn_backward_input(ctx, node, x, gamma, dy):
    a, shape, mb = node.attrs, node.inputs[0].shape, ctx.mb
    xhat, r = stats(ctx, grouped(ctx, x, shape, a["num_groups"]), a["eps"], GROUP_AXES)
    g = grouped(ctx, mb.mul(x=dy, y=gamma), shape, a["num_groups"])
    return mb.reshape(x=centered(ctx, g, xhat, r, GROUP_AXES), shape=ctx.ints(shape))


@mil_rule(K.GroupNormBackwardGamma, claim=NATIVE_BACKWARD)
def _gn_backward_gamma(ctx, node, x, dy):
    a, shape, mb = node.attrs, node.inputs[0].shape, ctx.mb
    xhat, _ = stats(ctx, grouped(ctx, x, shape, a["num_groups"]), a["eps"], GROUP_AXES)
    xhat = mb.reshape(x=xhat, shape=ctx.ints(shape))
    return rows_sum(ctx, mb.mul(x=dy, y=xhat), len(shape))


# ---- DiT modulation: x[B, S, D], per-sample vectors [B, D] ----
@mil_rule(K.AdaLayerNorm)
def _ada_layer_norm(ctx, node, x, shift, scale):
    mb = ctx.mb
    one_plus = mb.add(x=per_sample(ctx, scale), y=ctx.like(1, x))
    y = mb.mul(x=plain_ln(ctx, x, node.attrs["eps"]), y=one_plus)
    return mb.add(x=y, y=per_sample(ctx, shift))


@mil_rule(K.AdaLayerNormBackward, claim=NATIVE_BACKWARD)
def _ada_backward(ctx, node, x, scale, dy):
    mb = ctx.mb
    xhat, r = stats(ctx, x, node.attrs["eps"])
    one_plus = mb.add(x=per_sample(ctx, scale), y=ctx.like(1, x))
    dx = centered(ctx, mb.mul(x=dy, y=one_plus), xhat, r)
    dshift = mb.reduce_sum(x=dy, axes=ctx.ints([1]), keep_dims=False)
    dscale = mb.reduce_sum(x=mb.mul(x=dy, y=xhat), axes=ctx.ints([1]), keep_dims=False)
    return dx, dshift, dscale


@mil_rule(K.GatedResidual)
def _gated_residual(ctx, node, x, gate, y):
    return ctx.mb.add(x=x, y=ctx.mb.mul(x=per_sample(ctx, gate), y=y))


@mil_rule(K.LoraMatMul)
def _lora_matmul(ctx, node, x, w, a, b):
    """x·W + (x·A·B)·scale: three matmuls (the rank-R product first), a mul, an add (4-5
    ops)."""
    mb, scale = ctx.mb, node.attrs["scale"]
    low = mb.matmul(x=mb.matmul(x=x, y=a), y=b)
    if scale != 1.0:
        low = mb.mul(x=low, y=ctx.like(scale, low))
    return mb.add(x=mb.matmul(x=x, y=w), y=low)


@mil_rule(K.GatedResidualBackward, claim=NATIVE_BACKWARD)
def _gated_backward(ctx, node, gate, y, dout):
    mb = ctx.mb
    dgate = mb.reduce_sum(x=mb.mul(x=dout, y=y), axes=ctx.ints([1]), keep_dims=False)
    return dgate, mb.mul(x=per_sample(ctx, gate), y=dout)
