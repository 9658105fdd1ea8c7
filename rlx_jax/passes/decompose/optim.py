"""Decompositions of the optimizer-update kinds: optax's formulas in primitive IR (the reference
semantics of ir/reference_optim.py, translated), so a backend without the kind computes what the
user's optax code computed, operation for operation."""
from ...ir.ops import OpKind as K
from ...ir.reference_optim import adam_update, lion_update
from . import decomp
from .formulas import inline


@decomp(K.AdamUpdate)
def _adam_update(b, node, *operands):
    return inline(b, adam_update, operands, **node.attrs)


@decomp(K.LionUpdate)
def _lion_update(b, node, *operands):
    return inline(b, lion_update, operands, **node.attrs)
