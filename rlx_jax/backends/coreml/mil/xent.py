"""The dense-label softmax cross-entropy and its gradient in MIL (ir/reference_xent.py).

Forward, 8 ops, the max subtracted as optax's log_softmax does (so as stable):
    s = logits − reduce_max(logits); lse = log(reduce_sum(exp(s)))
    loss = reduce_sum(labels · (lse − s))
Backward, 6 ops: (softmax(logits) · reduce_sum(labels) − labels) · expand_dims(dloss, −1).
"""
from ....ir.ops import OpKind as K
from ....tables import NATIVE_BACKWARD
from .table import mil_rule


@mil_rule(K.SoftmaxCrossEntropy)
def _sce_dense(ctx, node, logits, labels):
    mb, last = ctx.mb, ctx.ints([-1])
    s = mb.sub(x=logits, y=mb.reduce_max(x=logits, axes=last, keep_dims=True))
    total = mb.reduce_sum(x=mb.exp(x=s), axes=last, keep_dims=True)
    lse = mb.log(x=total, epsilon=ctx.like(0, total))
    return mb.reduce_sum(x=mb.mul(x=labels, y=mb.sub(x=lse, y=s)), axes=last, keep_dims=False)


@mil_rule(K.SoftmaxCrossEntropyDenseBackward, claim=NATIVE_BACKWARD)
def _sce_dense_backward(ctx, node, logits, labels, dloss):
    mb, last = ctx.mb, ctx.ints([-1])
    mass = mb.reduce_sum(x=labels, axes=last, keep_dims=True)
    diff = mb.sub(x=mb.mul(x=mb.softmax(x=logits, axis=-1), y=mass), y=labels)
    return mb.mul(x=diff, y=mb.expand_dims(x=dloss, axes=last))
