"""rlx_jax.nn: high-level ops as JAX primitives, each one IR node with one backward node per
backward kind under `jax.grad` (docs/high-level-kinds.md is the contract).

Every op also runs under plain JAX (`jax.jit`, `jax.grad`, `jax.vmap`) through its jnp reference
implementation, so code using it stays ordinary JAX.
"""
from .activations import activation, gelu, relu, sigmoid, silu, softmax, tanh
from .attn import attention, rope, rope_tables
from .losses import softmax_cross_entropy_with_logits
from . import norms as _norms
from .primitive import promote


def _last_dim(name, x, *vecs):
    for v in vecs:
        if v is not None and v.shape != (x.shape[-1],):
            raise ValueError(f"{name}: parameter of shape {v.shape} must be [D] = "
                             f"[{x.shape[-1]}] for input {x.shape}")


def layer_norm(x, gamma, beta, eps=1e-5):
    """(x - mean) * rsqrt(var + eps) * gamma + beta over the last axis (biased variance)."""
    x, gamma, beta = promote(x, gamma, beta)
    _last_dim("layer_norm", x, gamma, beta)
    return _norms.layer_norm_p.bind(x, gamma, beta, eps=float(eps))


def rms_norm(x, gamma, beta=None, eps=1e-6):
    """x * rsqrt(mean(x²) + eps) * gamma (+ beta) over the last axis."""
    ops = promote(x, gamma) if beta is None else promote(x, gamma, beta)
    _last_dim("rms_norm", *ops)
    return _norms.rms_norm_p.bind(*ops, eps=float(eps), has_beta=beta is not None)


def group_norm(x, gamma, beta, num_groups, eps=1e-5):
    """Channels-last group norm: x[N, ..., C], statistics per (sample, group)."""
    x, gamma, beta = promote(x, gamma, beta)
    _last_dim("group_norm", x, gamma, beta)
    if x.ndim < 2 or x.shape[-1] % num_groups:
        raise ValueError(f"group_norm: C={x.shape[-1]} of {x.shape} is not divisible into "
                         f"{num_groups} groups (x must be [N, ..., C])")
    return _norms.group_norm_p.bind(x, gamma, beta, num_groups=int(num_groups), eps=float(eps))


def ada_layer_norm(x, shift, scale, eps=1e-6):
    """LayerNorm(x) without affine, modulated: · (1 + scale[:, None]) + shift[:, None];
    x[B, S, D], shift/scale[B, D]."""
    x, shift, scale = promote(x, shift, scale)
    if x.ndim != 3 or shift.shape != (x.shape[0], x.shape[2]) or scale.shape != shift.shape:
        raise ValueError(f"ada_layer_norm expects x[B, S, D], shift/scale[B, D]; got {x.shape}, "
                         f"{shift.shape}, {scale.shape}")
    return _norms.ada_layer_norm_p.bind(x, shift, scale, eps=float(eps))


def gated_residual(x, gate, y):
    """x + gate[:, None] · y; x, y[B, S, D], gate[B, D]."""
    x, gate, y = promote(x, gate, y)
    if x.ndim != 3 or y.shape != x.shape or gate.shape != (x.shape[0], x.shape[2]):
        raise ValueError(f"gated_residual expects x, y[B, S, D] and gate[B, D]; got {x.shape}, "
                         f"{gate.shape}, {y.shape}")
    return _norms.gated_residual_p.bind(x, gate, y)


__all__ = ["activation", "relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "layer_norm",
           "rms_norm", "group_norm", "attention", "rope", "rope_tables",
           "softmax_cross_entropy_with_logits", "ada_layer_norm", "gated_residual"]
