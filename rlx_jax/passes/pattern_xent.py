"""optax's softmax cross-entropy with probability (dense) labels, recognised as
SoftmaxCrossEntropy / SoftmaxCrossEntropyDenseBackward (ir/reference_xent.py); generated
patterns (passes/patterns.py) traced from the installed optax's own function, appended to
pattern_table.py's PATTERNS as XENT_PATTERNS:

  forward   optax.softmax_cross_entropy(logits, labels): −Σ labels · log_softmax(logits) over
            the last axis, logits and labels [..., C] of one shape and float dtype (the same
            jaxpr as the hand-written `-jnp.sum(labels * jax.nn.log_softmax(logits), -1)`)
  gradient  the joint forward and jax.vjp w.r.t. the logits: its cotangent of the logits,
            labels·(−dloss) + softmax·Σ(labels·dloss), becomes the backward kind

A gradient w.r.t. the labels (−dloss · log_softmax(logits)) is left as it is: a LogSoftmax
(the log_softmax pattern) and a product. Near misses stay primitives: another axis (optax's
`axis=` other than the last, or a sum over another axis than the log_softmax's), a `where`
mask, labels broadcast against the logits, log(softmax(x)) in place of log_softmax.
"""
import jax
import numpy as np

from ..ir.ops import OpKind as K
from .pattern_refs import F32, LEAD
from .patterns import Pattern, Reference

CLASSES = 7


def _optax_dense(logits, labels):
    import optax
    return optax.softmax_cross_entropy(logits, labels)


def _forward(logits, labels):
    return (_optax_dense(logits, labels),)


def _with_vjp(logits, labels, dy):
    """(loss, dlogits): the forward and its cotangent w.r.t. the logits for dy."""
    y, pull = jax.vjp(lambda v: _optax_dense(v, labels), logits)
    return (y, *pull(dy))


def _example(rank):
    lead = LEAD[:rank - 1]
    return {"logits": (lead + (CLASSES,), F32), "labels": (lead + (CLASSES,), F32),
            "dy": (lead, F32)}


def _fill(bound):
    if "logits" not in bound or "labels" not in bound:
        return None
    logits = bound["logits"]
    return {"dy": (tuple(logits[0][:-1]), logits[1]), **bound}


def _operands(o, *extra):
    """(logits, labels, *extra) when the kind takes them: one shape, one float dtype."""
    logits, labels = o["logits"], o["labels"]
    if logits.ndim < 1 or labels.shape != logits.shape or labels.dtype != logits.dtype or \
            np.dtype(logits.dtype).kind != "f":
        return None
    return (logits, labels) + tuple(o[n] for n in extra)


def _loss(b, o, p, root):
    ops = _operands(o)
    return None if ops is None else b.add(K.SoftmaxCrossEntropy, ops, {})


def _dlogits(b, o, p, root):
    ops = _operands(o, "dy")
    if ops is None or ops[2].shape != ops[0].shape[:-1]:
        return None
    return b.add(K.SoftmaxCrossEntropyDenseBackward, ops, {})


# (jax.grad alone has no log: the gradient reads only exp(logits − max))
FWD = Reference("optax softmax_cross_entropy", _forward, ("logits", "labels"), _example,
                fill=_fill, trigger={(K.Activation, "log"), (K.Activation, "exp")})
VJP = Reference("vjp(optax softmax_cross_entropy) w.r.t. the logits", _with_vjp,
                ("logits", "labels", "dy"), _example, fill=_fill, trigger={(K.Activation, "exp")})
XENT_PATTERNS = [Pattern(FWD, 0, _loss), Pattern(VJP, 0, _loss), Pattern(VJP, 1, _dlogits)]
