"""Activations and softmax as rlx primitives.

Forward: `rlx_activation[fn]` (IR: Activation[fn]), `rlx_softmax[axis]` (IR: Softmax[axis]),
`rlx_log_softmax[axis]` (IR: LogSoftmax[axis]).
Backward: `rlx_relu_backward` (ReluBackward), `rlx_activation_backward[fn]` (ActivationBackward).
Softmax and LogSoftmax have no backward kind: their JVPs are written with jnp ops.
"""
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike
from jax.interpreters import ad

from ..ir.ops import OpKind as K
from .primitive import Prim, define, differentiable

FNS: dict[str, Callable[[Any], jax.Array]] = {
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "silu": jax.nn.silu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
}


def activation_ref(x: jax.Array, *, fn: str) -> jax.Array:
    return FNS[fn](x)


def relu_backward_ref(x: jax.Array, dy: jax.Array) -> jax.Array:
    return jnp.where(x > 0, dy, jnp.zeros_like(dy))


def activation_backward_ref(x: jax.Array, dy: jax.Array, *, fn: str) -> jax.Array:
    """dy · f'(x), from JAX's own derivative of the reference activation."""
    return cast(jax.Array, jax.jvp(FNS[fn], (x,), (dy,))[1])


relu_backward_p = define("rlx_relu_backward", relu_backward_ref, kind=K.ReluBackward, rows=(0, 1))
activation_backward_p = define("rlx_activation_backward", activation_backward_ref,
                               kind=K.ActivationBackward, rows=(0, 1))


def _activation_bwd(ct: jax.Array, primals: Sequence[jax.Array], need: Any, *,
                    fn: str) -> list[jax.Array]:
    x, = primals
    if fn == "relu":
        return [relu_backward_p.bind(x, ct)]
    return [activation_backward_p.bind(x, ct, fn=fn)]


activation_p = differentiable("rlx_activation", activation_ref, kind=K.Activation, linear=(0,),
                              backward=_activation_bwd, rows=(0,))


def softmax_ref(x: jax.Array, *, axis: int) -> jax.Array:
    m = jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=axis, keepdims=True)


def _softmax_jvp(primals: Sequence[jax.Array], tangents: Sequence[Any], *,
                 axis: int) -> tuple[jax.Array, jax.Array]:
    x, = primals
    t, = tangents
    y = softmax_p.bind(x, axis=axis)
    t = ad.instantiate_zeros(t)
    return y, y * (t - jnp.sum(y * t, axis=axis, keepdims=True))


def _softmax_attrs(params: dict[str, Any], operands: Sequence[jax.Array]) -> dict[str, Any]:
    return {"axis": params["axis"] % operands[0].ndim}


softmax_p = Prim("rlx_softmax", softmax_ref, kind=K.Softmax, attrs=_softmax_attrs, rows=(0,),
                 jvp=_softmax_jvp)


def log_softmax_ref(x: jax.Array, *, axis: int) -> jax.Array:
    """jax.nn.log_softmax's formula: (x - max) - log Σ exp(x - max)."""
    shifted = x - jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


def _log_softmax_jvp(primals: Sequence[jax.Array], tangents: Sequence[Any], *,
                     axis: int) -> tuple[jax.Array, jax.Array]:
    x, = primals
    t, = tangents
    y = log_softmax_p.bind(x, axis=axis)
    t = ad.instantiate_zeros(t)
    return y, t - jnp.sum(jnp.exp(y) * t, axis=axis, keepdims=True)


log_softmax_p = Prim("rlx_log_softmax", log_softmax_ref, kind=K.LogSoftmax, attrs=_softmax_attrs,
                     rows=(0,), jvp=_log_softmax_jvp)


def _check_fn(fn: str) -> None:
    if fn not in FNS:
        raise ValueError(f"unknown activation {fn!r}; choose one of {sorted(FNS)}")


def activation(x: ArrayLike, fn: str) -> jax.Array:
    _check_fn(fn)
    return cast(jax.Array, activation_p.bind(jnp.asarray(x), fn=fn))


def relu(x: ArrayLike) -> jax.Array:
    """max(x, 0); gradient dy·(x > 0) as one ReluBackward node."""
    return activation(x, "relu")


def gelu(x: ArrayLike, approximate: bool = False) -> jax.Array:
    """GELU (exact erf form, or the tanh approximation with approximate=True)."""
    return activation(x, "gelu_tanh" if approximate else "gelu")


def silu(x: ArrayLike) -> jax.Array:
    return activation(x, "silu")


def sigmoid(x: ArrayLike) -> jax.Array:
    return activation(x, "sigmoid")


def tanh(x: ArrayLike) -> jax.Array:
    return activation(x, "tanh")


def softmax(x: ArrayLike, axis: int = -1) -> jax.Array:
    """exp(x - max) / sum(exp(x - max)) along `axis` (one Softmax node)."""
    x = jnp.asarray(x)
    return cast(jax.Array, softmax_p.bind(x, axis=int(axis) % x.ndim - x.ndim))


def log_softmax(x: ArrayLike, axis: int = -1) -> jax.Array:
    """(x - max) - log Σ exp(x - max) along `axis` (one LogSoftmax node)."""
    x = jnp.asarray(x)
    return cast(jax.Array, log_softmax_p.bind(x, axis=int(axis) % x.ndim - x.ndim))
