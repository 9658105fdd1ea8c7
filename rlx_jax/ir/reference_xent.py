"""Reference semantics of the softmax cross-entropy with probability (dense) labels, as
`optax.softmax_cross_entropy(logits, labels)` computes it (passes/pattern_xent.py recognises
optax's own formula and its gradient):

SoftmaxCrossEntropy (the RLX kind for dense labels)
    operands  logits [..., C], labels [..., C] (one float dtype, one shape)
    result    loss [...] = −Σ_c labels · log_softmax(logits), over the last axis

SoftmaxCrossEntropyDenseBackward (rlx_jax extension semantics: the gradient w.r.t. the logits)
    operands  logits [..., C], labels [..., C], dloss [...] (the loss's cotangent)
    result    dlogits [..., C] = (softmax(logits) · Σ_c labels − labels) · dloss[..., None]

The labels need not sum to 1 (the gradient's Σ_c labels keeps the general case). The gradient
w.r.t. the labels, −log_softmax(logits) · dloss[..., None], is not a kind: where a program
differentiates w.r.t. the labels it stays a LogSoftmax and a product.
"""
import jax
import jax.numpy as jnp

from .ops import OpKind as K


def softmax_cross_entropy(logits, labels):
    """SoftmaxCrossEntropy: optax's formula, operation for operation."""
    return -jnp.sum(labels * jax.nn.log_softmax(logits, -1), -1)


def softmax_cross_entropy_dense_backward(logits, labels, dloss):
    """SoftmaxCrossEntropyDenseBackward: (softmax(logits)·Σ labels − labels)·dloss[..., None]."""
    p = jax.nn.softmax(logits, -1)
    return (p * jnp.sum(labels, -1, keepdims=True) - labels) * dloss[..., None]


XENT_REFERENCE = {
    K.SoftmaxCrossEntropy: softmax_cross_entropy,
    K.SoftmaxCrossEntropyDenseBackward: softmax_cross_entropy_dense_backward,
}
