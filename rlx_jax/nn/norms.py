"""Normalizations as rlx primitives: layer_norm, rms_norm, group_norm, ada_layer_norm,
gated_residual. All statistics over the last axis (group_norm: per sample and group, channels
last); reference implementations compute in the input dtype."""
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from ..ir.ops import OpKind as K
from .primitive import define, differentiable, promote


def _rows(x: jax.Array, keep: int) -> jax.Array:
    """Sum over every axis but the last `keep`."""
    return jnp.sum(x, axis=tuple(range(x.ndim - keep)))


def _stats(x: jax.Array, eps: float, axes: int | tuple[int, ...] = -1
           ) -> tuple[jax.Array, jax.Array]:
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    r = jax.lax.rsqrt(jnp.mean(xc * xc, axis=axes, keepdims=True) + eps)
    return xc * r, r


# ---- LayerNorm ----
def layer_norm_ref(x: Array, gamma: Array, beta: Array, *, eps: float) -> Array:
    return _stats(x, eps)[0] * gamma + beta


def ln_backward_input_ref(x: Array, gamma: Array, dy: Array, *, eps: float) -> Array:
    xhat, r = _stats(x, eps)
    g = dy * gamma
    return r * (g - jnp.mean(g, -1, keepdims=True) - xhat * jnp.mean(g * xhat, -1, keepdims=True))


def ln_backward_gamma_ref(x: Array, dy: Array, *, eps: float) -> Array:
    return _rows(dy * _stats(x, eps)[0], 1)


ln_bwd_input_p = define("rlx_layer_norm_backward_input", ln_backward_input_ref,
                        kind=K.LayerNormBackwardInput, rows=(0, 2))
ln_bwd_gamma_p = define("rlx_layer_norm_backward_gamma", ln_backward_gamma_ref,
                        kind=K.LayerNormBackwardGamma)


def _ln_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool], *,
            eps: float) -> list[Array | None]:
    x, gamma, _ = primals
    return [ln_bwd_input_p.bind(x, gamma, ct, eps=eps) if need[0] else None,
            ln_bwd_gamma_p.bind(x, ct, eps=eps) if need[1] else None,
            _rows(ct, 1) if need[2] else None]


layer_norm_p = differentiable("rlx_layer_norm", layer_norm_ref, kind=K.LayerNorm, linear=(0, 1, 2),
                              backward=_ln_bwd, rows=(0,))


# ---- RmsNorm ----
def _rms(x: Array, eps: float) -> Array:
    return jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def rms_norm_ref(x: Array, gamma: Array, *beta: Array, eps: float, has_beta: bool) -> Array:
    y = x * _rms(x, eps) * gamma
    return y + beta[0] if has_beta else y


def rms_backward_input_ref(x: Array, gamma: Array, dy: Array, *, eps: float) -> Array:
    r = _rms(x, eps)
    g = dy * gamma
    return r * g - x * r ** 3 * jnp.mean(x * g, -1, keepdims=True)


def rms_backward_gamma_ref(x: Array, dy: Array, *, eps: float) -> Array:
    return _rows(dy * x * _rms(x, eps), 1)


def rms_backward_beta_ref(dy: Array) -> Array:
    return _rows(dy, 1)


rms_bwd_input_p = define("rlx_rms_norm_backward_input", rms_backward_input_ref,
                         kind=K.RmsNormBackwardInput, rows=(0, 2))
rms_bwd_gamma_p = define("rlx_rms_norm_backward_gamma", rms_backward_gamma_ref,
                         kind=K.RmsNormBackwardGamma)
rms_bwd_beta_p = define("rlx_rms_norm_backward_beta", rms_backward_beta_ref,
                        kind=K.RmsNormBackwardBeta)


def _rms_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool], *, eps: float,
             has_beta: bool) -> list[Array | None]:
    x, gamma = primals[:2]
    out = [rms_bwd_input_p.bind(x, gamma, ct, eps=eps) if need[0] else None,
           rms_bwd_gamma_p.bind(x, ct, eps=eps) if need[1] else None]
    if has_beta:
        out.append(rms_bwd_beta_p.bind(ct) if need[2] else None)
    return out


rms_norm_p = differentiable("rlx_rms_norm", rms_norm_ref, kind=K.RmsNorm, linear=(0, 1, 2),
                            backward=_rms_bwd, rows=(0,))


# ---- GroupNorm (channels last: x[N, ..., C]) ----
def _grouped(x: Array, num_groups: int) -> Array:
    n, c = x.shape[0], x.shape[-1]
    return x.reshape(n, -1, num_groups, c // num_groups)


def group_norm_ref(x: Array, gamma: Array, beta: Array, *, num_groups: int,
                   eps: float) -> Array:
    xhat = _stats(_grouped(x, num_groups), eps, axes=(1, 3))[0].reshape(x.shape)
    return xhat * gamma + beta


def gn_backward_input_ref(x: Array, gamma: Array, dy: Array, *, num_groups: int,
                          eps: float) -> Array:
    xhat, r = _stats(_grouped(x, num_groups), eps, axes=(1, 3))
    g = _grouped(dy * gamma, num_groups)
    m: Callable[[Array], Array] = lambda v: jnp.mean(v, axis=(1, 3), keepdims=True)  # noqa: E731
    return (r * (g - m(g) - xhat * m(g * xhat))).reshape(x.shape)


def gn_backward_gamma_ref(x: Array, dy: Array, *, num_groups: int, eps: float) -> Array:
    xhat = _stats(_grouped(x, num_groups), eps, axes=(1, 3))[0].reshape(x.shape)
    return _rows(dy * xhat, 1)


def gn_backward_beta_ref(dy: Array) -> Array:
    return _rows(dy, 1)


gn_bwd_input_p = define("rlx_group_norm_backward_input", gn_backward_input_ref,
                        kind=K.GroupNormBackwardInput)
gn_bwd_gamma_p = define("rlx_group_norm_backward_gamma", gn_backward_gamma_ref,
                        kind=K.GroupNormBackwardGamma)
gn_bwd_beta_p = define("rlx_group_norm_backward_beta", gn_backward_beta_ref,
                       kind=K.GroupNormBackwardBeta)


def _gn_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool], *, num_groups: int,
            eps: float) -> list[Array | None]:
    x, gamma, _ = primals
    kw = dict(num_groups=num_groups, eps=eps)
    return [gn_bwd_input_p.bind(x, gamma, ct, **kw) if need[0] else None,
            gn_bwd_gamma_p.bind(x, ct, **kw) if need[1] else None,
            gn_bwd_beta_p.bind(ct) if need[2] else None]


group_norm_p = differentiable("rlx_group_norm", group_norm_ref, kind=K.GroupNorm, linear=(0, 1, 2),
                              backward=_gn_bwd)


# ---- DiT modulation: AdaLayerNorm, GatedResidual (x[B, S, D], per-sample vectors [B, D]) ----
def ada_layer_norm_ref(x: Array, shift: Array, scale: Array, *, eps: float) -> Array:
    return _stats(x, eps)[0] * (1 + scale[:, None]) + shift[:, None]


def ada_backward_ref(x: Array, scale: Array, dy: Array, *, eps: float
                     ) -> tuple[Array, Array, Array]:
    xhat, r = _stats(x, eps)
    g = dy * (1 + scale[:, None])
    dx = r * (g - jnp.mean(g, -1, keepdims=True) - xhat * jnp.mean(g * xhat, -1, keepdims=True))
    return dx, jnp.sum(dy, axis=1), jnp.sum(dy * xhat, axis=1)


ada_bwd_p = define("rlx_ada_layer_norm_backward", ada_backward_ref, kind=K.AdaLayerNormBackward,
                   multiple_results=True)


def _ada_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool], *,
             eps: float) -> list[Array]:
    x, _, scale = primals
    dx, dshift, dscale = ada_bwd_p.bind(x, scale, ct, eps=eps)
    return [dx, dshift, dscale]


ada_layer_norm_p = differentiable("rlx_ada_layer_norm", ada_layer_norm_ref, kind=K.AdaLayerNorm,
                                  linear=(0, 1, 2), backward=_ada_bwd)


def gated_residual_ref(x: Array, gate: Array, y: Array) -> Array:
    return x + gate[:, None] * y


def gated_backward_ref(gate: Array, y: Array, dout: Array) -> tuple[Array, Array]:
    return jnp.sum(dout * y, axis=1), gate[:, None] * dout


gated_bwd_p = define("rlx_gated_residual_backward", gated_backward_ref,
                     kind=K.GatedResidualBackward, multiple_results=True)


def _gated_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool],
               **params: Any) -> list[Array | None]:
    _, gate, y = primals
    dgate, dy = gated_bwd_p.bind(gate, y, ct) if (need[1] or need[2]) else (None, None)
    return [ct, dgate, dy]


gated_residual_p = differentiable("rlx_gated_residual", gated_residual_ref, kind=K.GatedResidual,
                                  linear=(0, 1, 2), backward=_gated_bwd)


# ---- the public wrappers (rlx_jax.nn.<name>) ----
def _last_dim(name: str, x: Array, *vecs: Array | None) -> None:
    for v in vecs:
        if v is not None and v.shape != (x.shape[-1],):
            raise ValueError(f"{name}: parameter of shape {v.shape} must be [D] = "
                             f"[{x.shape[-1]}] for input {x.shape}")


def layer_norm(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5) -> Array:
    """(x - mean) * rsqrt(var + eps) * gamma + beta over the last axis (biased variance)."""
    x, gamma, beta = promote(x, gamma, beta)
    _last_dim("layer_norm", x, gamma, beta)
    return cast(Array, layer_norm_p.bind(x, gamma, beta, eps=float(eps)))


def rms_norm(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike | None = None,
             eps: float = 1e-6) -> Array:
    """x * rsqrt(mean(x²) + eps) * gamma (+ beta) over the last axis."""
    ops = promote(x, gamma) if beta is None else promote(x, gamma, beta)
    _last_dim("rms_norm", *ops)
    return cast(Array, rms_norm_p.bind(*ops, eps=float(eps), has_beta=beta is not None))


def group_norm(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, num_groups: int,
               eps: float = 1e-5) -> Array:
    """Channels-last group norm: x[N, ..., C], statistics per (sample, group)."""
    x, gamma, beta = promote(x, gamma, beta)
    _last_dim("group_norm", x, gamma, beta)
    if x.ndim < 2 or x.shape[-1] % num_groups:
        raise ValueError(f"group_norm: C={x.shape[-1]} of {x.shape} is not divisible into "
                         f"{num_groups} groups (x must be [N, ..., C])")
    return cast(Array, group_norm_p.bind(x, gamma, beta, num_groups=int(num_groups),
                                         eps=float(eps)))


def ada_layer_norm(x: ArrayLike, shift: ArrayLike, scale: ArrayLike,
                   eps: float = 1e-6) -> Array:
    """LayerNorm(x) without affine, modulated: · (1 + scale[:, None]) + shift[:, None];
    x[B, S, D], shift/scale[B, D]."""
    x, shift, scale = promote(x, shift, scale)
    if x.ndim != 3 or shift.shape != (x.shape[0], x.shape[2]) or scale.shape != shift.shape:
        raise ValueError(f"ada_layer_norm expects x[B, S, D], shift/scale[B, D]; got {x.shape}, "
                         f"{shift.shape}, {scale.shape}")
    return cast(Array, ada_layer_norm_p.bind(x, shift, scale, eps=float(eps)))


def gated_residual(x: ArrayLike, gate: ArrayLike, y: ArrayLike) -> Array:
    """x + gate[:, None] · y; x, y[B, S, D], gate[B, D]."""
    x, gate, y = promote(x, gate, y)
    if x.ndim != 3 or y.shape != x.shape or gate.shape != (x.shape[0], x.shape[2]):
        raise ValueError(f"gated_residual expects x, y[B, S, D] and gate[B, D]; got {x.shape}, "
                         f"{gate.shape}, {y.shape}")
    return cast(Array, gated_residual_p.bind(x, gate, y))
