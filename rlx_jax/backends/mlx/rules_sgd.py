"""MLX rule for SgdMomentumUpdate (ir/reference_sgd.py): optax's formulas, one expression per
leaf, which mx.compile fuses into one kernel per leaf."""
from ...ir.ops import OpKind as K
from ...ir.reference_sgd import sgd_leaves
from .table import mlx_rule


@mlx_rule(K.SgdMomentumUpdate)
def _sgd_momentum_update(ctx, node, *operands):
    a = node.attrs
    lr, m = a["lr"], a["momentum"]
    step, ps, gs, ts = sgd_leaves(operands, lr)
    new_t = [g + m * t for g, t in zip(gs, ts)]
    us = [g + m * t for g, t in zip(gs, new_t)] if a["nesterov"] else new_t
    new_p = [p + ((-lr) * u if step is None else step.astype(p.dtype) * u)
             for p, u in zip(ps, us)]
    return (*new_p, *new_t)
