"""The decompositions of the dense-label softmax cross-entropy and its gradient: their reference
formulas (ir/reference_xent.py), translated, so a backend without the kinds computes optax's
formula operation for operation (log_softmax's max subtraction included)."""
from ...ir.ops import OpKind as K
from ...ir.reference_xent import softmax_cross_entropy, softmax_cross_entropy_dense_backward
from . import decomp
from .formulas import inline


@decomp(K.SoftmaxCrossEntropy)
def _sce_dense(b, node, logits, labels):
    return inline(b, softmax_cross_entropy, (logits, labels))


@decomp(K.SoftmaxCrossEntropyDenseBackward)
def _sce_dense_backward(b, node, logits, labels, dloss):
    return inline(b, softmax_cross_entropy_dense_backward, (logits, labels, dloss))
