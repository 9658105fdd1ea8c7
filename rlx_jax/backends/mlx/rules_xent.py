"""MLX rules for the dense-label softmax cross-entropy and its gradient (ir/reference_xent.py):
log_softmax as logits − mx.logsumexp (MLX's logsumexp subtracts the row's max, as optax's
log_softmax does); the gradient's softmax as exp(logits − logsumexp), the forward's
computation of the same logits (which mx.compile may compute once for both)."""
import mlx.core as mx

from ...ir.ops import OpKind as K
from ...tables import NATIVE_BACKWARD
from .table import mlx_rule


@mlx_rule(K.SoftmaxCrossEntropy)
def _sce_dense(ctx, node, logits, labels):
    """−Σ labels·(logits − logsumexp(logits)) over the last axis."""
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return -mx.sum(labels * logp, axis=-1)


@mlx_rule(K.SoftmaxCrossEntropyDenseBackward, claim=NATIVE_BACKWARD)
def _sce_dense_backward(ctx, node, logits, labels, dloss):
    """(softmax(logits)·Σ labels − labels)·dloss[..., None], softmax = exp(logits − lse)."""
    p = mx.exp(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    return (p * mx.sum(labels, axis=-1, keepdims=True) - labels) * mx.expand_dims(dloss, -1)
