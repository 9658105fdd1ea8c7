"""Reference semantics of the optimizer-update kinds (ir.ops.OPTIMIZER), as jnp code of the
node's operands and attributes.

AdamUpdate is one step of `optax.adam(lr, b1, b2, eps, eps_root)` (or of `optax.adamw` with
its `weight_decay`) followed by `optax.apply_updates`, over a group of k parameter leaves that
share the step count:

    operands  count (int32 scalar: the state's count before the step), [step: the float32
              step size, when lr is None], p_1..p_k, g_1..g_k, mu_1..mu_k, nu_1..nu_k (each
              leaf's p, g, mu and nu of one shape; p, g and nu of one float dtype, mu of
              that or another: optax's mu_dtype)
    attrs     lr, b1, b2, eps, eps_root, weight_decay (Python floats, as passed to optax;
              weight_decay 0.0 for adam); lr None: a learning-rate schedule, whose step size
              -schedule(count) the program computes and passes as `step`
    results   count', p'_1..p'_k, mu'_1..mu'_k, nu'_1..nu'_k

with optax's own formulas, operation for operation (so the rounding is the same), where
every line computes as JAX promotes its operands:

    count' = count + 1, saturating at the int32 maximum (optax.safe_increment)
    mu'    = (1 - b1)·g + b1·mu                 nu' = (1 - b2)·g² + b2·nu
             (mu' computed in the wider of g's and mu's dtypes, returned in mu's; the update
             below uses it unrounded, as optax does with a mu_dtype)
    u      = (mu' / (1 - b1^count')) / (sqrt(nu' / (1 - b2^count') + eps_root) + eps)
    p'     = p + (-lr)·u                         (adam)
    p'     = p + (-lr)·(u + weight_decay·p)      (adamw: weight_decay > 0)
    p'     = p + step·(...)                      (a schedule: lr None; step in u's dtype)
             (p' computed in the wider of p's and mu's dtypes, returned in p's: apply_updates)

LionUpdate is one step of `optax.lion(lr, b1, b2, weight_decay=...)` (mode "hard") followed by
`optax.apply_updates`, over a group of k leaves sharing the hyperparameters (Lion's count
enters no formula, so the node neither takes nor yields it):

    operands  [step], p_1..p_k, g_1..g_k, mu_1..mu_k (as AdamUpdate's, without count and nu)
    attrs     lr, b1, b2, weight_decay (Python floats, as passed to optax; lr None: a schedule)
    results   p'_1..p'_k, mu'_1..mu'_k

    u      = sign((1 - b1)·g + b1·mu) + weight_decay·p
    mu'    = (1 - b2)·g + b2·mu                  (returned in mu's dtype: optax's mu_dtype)
    p'     = p + (-lr)·u, or p + step·u under a schedule (returned in p's dtype)
"""
import jax.numpy as jnp

from .ops import OpKind as K


def adam_leaves(operands, lr, states=2):
    """(count, step, ps, gs, mus, nus) of an AdamUpdate's operands (step: the step size
    operand of a scheduled one, None when lr is an attribute); with states=1, (count, step,
    ps, gs, mus) of a LionUpdate's."""
    count, rest = operands[0], operands[1:]
    step = None
    if lr is None:
        step, rest = rest[0], rest[1:]
    k = len(rest) // (2 + states)
    return (count, step) + tuple(tuple(rest[i * k:(i + 1) * k]) for i in range(2 + states))


def adam_update(count, *leaves, lr, b1, b2, eps, eps_root, weight_decay=0.0):
    """AdamUpdate (module docstring): (count', *p', *mu', *nu')."""
    _, size, ps, gs, mus, nus = adam_leaves((count,) + leaves, lr)
    top = jnp.iinfo(count.dtype).max
    step = jnp.where(count < top, count + 1, top)
    mu = [(1 - b1) * g + b1 * m for g, m in zip(gs, mus)]
    nu = [(1 - b2) * (g * g) + b2 * v for g, v in zip(gs, nus)]
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    new_p = []
    for p, m, v in zip(ps, mu, nu):
        u = (m / bc1.astype(m.dtype)) / (jnp.sqrt(v / bc2.astype(v.dtype) + eps_root) + eps)
        if weight_decay:
            u = u + weight_decay * p
        new_p.append((p + ((-lr) * u if size is None else size.astype(u.dtype) * u))
                     .astype(p.dtype))
    return (step, *new_p, *(m.astype(old.dtype) for m, old in zip(mu, mus)), *nu)


def lion_update(*leaves, lr, b1, b2, weight_decay):
    """LionUpdate (module docstring): (*p', *mu')."""
    _, size, ps, gs, mus = adam_leaves((None,) + leaves, lr, states=1)
    new_p, new_mu = [], []
    for p, g, m in zip(ps, gs, mus):
        u = jnp.sign((1 - b1) * g + b1 * m) + weight_decay * p
        new_p.append((p + ((-lr) * u if size is None else size.astype(u.dtype) * u))
                     .astype(p.dtype))
        new_mu.append(((1 - b2) * g + b2 * m).astype(m.dtype))
    return (*new_p, *new_mu)


OPTIM_REFERENCE = {
    K.AdamUpdate: adam_update,
    K.LionUpdate: lion_update,
}
