"""Softmax cross-entropy with integer labels as an rlx primitive (O(1) in the class count)."""
from collections.abc import Sequence
from typing import cast

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from ..ir.ops import OpKind as K
from .primitive import define, differentiable


def sce_ref(logits: Array, labels: Array) -> Array:
    m = jax.lax.stop_gradient(jnp.max(logits, -1, keepdims=True))
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), -1)) + m[:, 0]
    picked = jnp.take_along_axis(logits, labels[:, None].astype(jnp.int32), -1)[:, 0]
    return lse - picked


def sce_backward_ref(logits: Array, labels: Array, dloss: Array) -> Array:
    onehot = labels[:, None] == jnp.arange(logits.shape[-1], dtype=labels.dtype)
    return (jax.nn.softmax(logits, -1) - onehot.astype(logits.dtype)) * dloss[:, None]


sce_bwd_p = define("rlx_softmax_cross_entropy_backward", sce_backward_ref,
                   kind=K.SoftmaxCrossEntropyBackward)


def _sce_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool]) -> list[Array]:
    logits, labels = primals
    return [sce_bwd_p.bind(logits, labels, ct)]


sce_p = differentiable("rlx_softmax_cross_entropy_with_logits", sce_ref,
                       kind=K.SoftmaxCrossEntropyWithLogits, linear=(0,), backward=_sce_bwd)


def softmax_cross_entropy_with_logits(logits: ArrayLike, labels: ArrayLike) -> Array:
    """Per-example loss logsumexp(logits) - logits[label]: logits[..., C], integer labels[...].

    One SoftmaxCrossEntropyWithLogits node on [N, C] (leading axes are flattened); its gradient
    is one SoftmaxCrossEntropyBackward node.
    """
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"labels must be integers (class indices), got {labels.dtype}")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels shape {labels.shape} must equal logits shape without the class "
                         f"axis {logits.shape[:-1]}")
    lead = labels.shape
    flat = sce_p.bind(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return cast(Array, flat.reshape(lead))
