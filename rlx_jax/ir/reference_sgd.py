"""Reference semantics of SgdMomentumUpdate (rlx_jax extension): one step of
`optax.sgd(lr, momentum, nesterov)` followed by `optax.apply_updates`, over a group of k
parameter leaves sharing the hyperparameters (passes/recognize_sgd.py recognises optax's code):

    operands  [step: the step size, when lr is None], p_1..p_k, g_1..g_k, t_1..t_k (each leaf's
              parameter, gradient and momentum trace, of one shape and float dtype)
    attrs     lr (the Python float passed to optax, or None: a learning-rate schedule whose step
              size -schedule(count) the program computes and passes as `step`), momentum,
              nesterov (bool)
    results   p'_1..p'_k, t'_1..t'_k

with optax's own formulas, operation for operation (so the rounding is the same):

    t' = g + momentum·t
    u  = g + momentum·t'   (nesterov)      u = t'   (otherwise)
    p' = p + (-lr)·u                       (p' = p + step·u with a schedule)
"""
from .ops import OpKind as K


def sgd_leaves(operands, lr):
    """(step, ps, gs, ts) of an SgdMomentumUpdate's operands (step None when lr is given)."""
    step, rest = (None, operands) if lr is not None else (operands[0], operands[1:])
    k = len(rest) // 3
    return (step,) + tuple(tuple(rest[i * k:(i + 1) * k]) for i in range(3))


def sgd_momentum_update(*operands, lr, momentum, nesterov):
    """SgdMomentumUpdate (module docstring): (*p', *t')."""
    step, ps, gs, ts = sgd_leaves(operands, lr)
    new_t = [g + momentum * t for g, t in zip(gs, ts)]
    us = [g + momentum * t for g, t in zip(gs, new_t)] if nesterov else new_t
    new_p = [p + ((-lr) * u if step is None else step.astype(p.dtype) * u)
             for p, u in zip(ps, us)]
    return (*new_p, *new_t)


SGD_REFERENCE = {
    K.SgdMomentumUpdate: sgd_momentum_update,
}
