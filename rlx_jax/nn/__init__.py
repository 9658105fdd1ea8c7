"""rlx_jax.nn: high-level ops as JAX primitives, each one IR node with one backward node per
backward kind under `jax.grad` (docs/high-level-kinds.md is the contract).

Every op also runs under plain JAX (`jax.jit`, `jax.grad`, `jax.vmap`) through its jnp reference
implementation, so code using it stays ordinary JAX.
"""
from .activations import activation, gelu, log_softmax, relu, sigmoid, silu, softmax, tanh
from .attn import attention, rope, rope_tables
from .losses import softmax_cross_entropy_with_logits
from .norms import ada_layer_norm, gated_residual, group_norm, layer_norm, rms_norm

__all__ = ["activation", "relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
           "layer_norm",
           "rms_norm", "group_norm", "attention", "rope", "rope_tables",
           "softmax_cross_entropy_with_logits", "ada_layer_norm", "gated_residual"]
