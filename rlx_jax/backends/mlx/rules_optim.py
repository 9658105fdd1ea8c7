"""MLX rules for the optimizer-update kinds AdamUpdate and LionUpdate (semantics:
ir/reference_optim.py). One MLX expression per leaf, which mx.compile fuses into one kernel per
leaf; Adam's bias corrections are computed once per node."""
import mlx.core as mx

from ...ir.ops import OpKind as K
from ...ir.reference_optim import adam_leaves
from .rules_elementwise import jax_sign
from .table import highest, mlx_rule


@mlx_rule(K.AdamUpdate)
def _adam_update(ctx, node, count, *leaves):
    a = node.attrs
    b1, b2, lr, eps, eps_root = a["b1"], a["b2"], a["lr"], a["eps"], a["eps_root"]
    _, size, ps, gs, mus, nus = adam_leaves((count,) + leaves, lr)
    top = highest(count.dtype)
    step = mx.where(count < top, count + 1, mx.array(top, dtype=count.dtype))
    # JAX computes b ** count' in float32 (float64 for float64 leaves), then casts to the leaf's
    dtype = mx.float64 if ps and ps[0].dtype == mx.float64 else mx.float32
    steps = step.astype(dtype)
    bc1 = 1 - mx.power(mx.array(b1, dtype=dtype), steps)
    bc2 = 1 - mx.power(mx.array(b2, dtype=dtype), steps)
    new_p, new_mu, new_nu = [], [], []
    for p, g, mu, nu in zip(ps, gs, mus, nus):
        m = (1 - b1) * g + b1 * mu
        v = (1 - b2) * (g * g) + b2 * nu
        vhat = v / bc2.astype(v.dtype)
        if eps_root:
            vhat = vhat + eps_root
        u = (m / bc1.astype(m.dtype)) / (mx.sqrt(vhat) + eps)
        if a["weight_decay"]:
            u = u + a["weight_decay"] * p
        new_p.append((p + ((-lr) * u if size is None else size.astype(u.dtype) * u))
                     .astype(p.dtype))
        new_mu.append(m.astype(mu.dtype))          # optax's mu_dtype: stored rounded
        new_nu.append(v)
    return (step, *new_p, *new_mu, *new_nu)


@mlx_rule(K.LionUpdate)
def _lion_update(ctx, node, *leaves):
    a = node.attrs
    b1, b2, lr, wd = a["b1"], a["b2"], a["lr"], a["weight_decay"]
    _, size, ps, gs, mus = adam_leaves((None,) + leaves, lr, states=1)
    new_p, new_mu = [], []
    for p, g, mu in zip(ps, gs, mus):
        u = jax_sign((1 - b1) * g + b1 * mu) + wd * p
        new_p.append((p + ((-lr) * u if size is None else size.astype(u.dtype) * u))
                     .astype(p.dtype))
        new_mu.append(((1 - b2) * g + b2 * mu).astype(mu.dtype))
    return (*new_p, *new_mu)
