"""The decomposition of SgdMomentumUpdate: optax's sgd formulas (ir/reference_sgd.py),
translated, so a backend without the kind computes what the user's optax code computed,
operation for operation."""
from ...ir.ops import OpKind as K
from ...ir.reference_sgd import sgd_momentum_update
from . import decomp
from .formulas import inline


@decomp(K.SgdMomentumUpdate)
def _sgd_momentum_update(b, node, *operands):
    return inline(b, sgd_momentum_update, operands, **node.attrs)
