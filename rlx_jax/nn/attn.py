"""Scaled dot-product attention and rotary embeddings as rlx primitives.

attention(q, k, v[, mask]): layout "BHSD" (q[B, H, Sq, D]) or "BSHD" (q[B, Sq, H, D]); the mask
is broadcastable to [B, H, Sq, Sk] in either layout; bool masks keep True, additive masks are
added to the scaled scores; causal masks key j > query i. Masked scores become the dtype's most
negative finite value, so a fully masked row attends uniformly instead of producing NaN.
"""
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike, DTypeLike

from ..ir.ops import OpKind as K
from .primitive import define, differentiable, promote
from .rotary import rope_backward_ref, rope_ref, rope_shapes_ok


def _to_bhsd(t: Array, layout: str) -> Array:
    return t if layout == "BHSD" else jnp.swapaxes(t, 1, 2)


def _scores(q: Array, k: Array, mask: Any, *, scale: float, causal: bool, layout: str,
            mask_kind: str) -> Array:
    q, k = _to_bhsd(q, layout), _to_bhsd(k, layout)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * jnp.asarray(scale, q.dtype)
    low = jnp.finfo(s.dtype).min
    if mask_kind == "additive":
        s = s + mask.astype(s.dtype)
    elif mask_kind == "bool":
        s = jnp.where(mask, s, low)
    if causal:
        i = jax.lax.broadcasted_iota(jnp.int32, s.shape[-2:], 0)
        j = jax.lax.broadcasted_iota(jnp.int32, s.shape[-2:], 1)
        s = jnp.where(j <= i, s, low)
    return s


def _probs(q: Array, k: Array, mask: Any, **params: Any) -> Array:
    s = _scores(q, k, mask, **params)
    m = jax.lax.stop_gradient(jnp.max(s, -1, keepdims=True))
    e = jnp.exp(s - m)
    return e / jnp.sum(e, -1, keepdims=True)


def attention_ref(q: Array, k: Array, v: Array, *mask: Array, scale: float, causal: bool,
                  layout: str, mask_kind: str) -> Array:
    p = _probs(q, k, mask[0] if mask else None, scale=scale, causal=causal, layout=layout,
               mask_kind=mask_kind)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, _to_bhsd(v, layout))
    return _to_bhsd(o, layout)


def attention_backward_ref(q: Array, k: Array, v: Array, *rest: Array, scale: float,
                           causal: bool, layout: str, mask_kind: str) -> tuple[Array, ...]:
    """(dq, dk, dv) from one recompute of the probabilities."""
    mask, dout = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    params = dict(scale=scale, causal=causal, layout=layout, mask_kind=mask_kind)
    p = _probs(q, k, mask, **params)
    qb, kb, vb, db = (_to_bhsd(t, layout) for t in (q, k, v, dout))
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, db)
    dp = jnp.einsum("bhqd,bhkd->bhqk", db, vb)
    ds = p * (dp - jnp.sum(dp * p, -1, keepdims=True)) * jnp.asarray(scale, p.dtype)
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, kb)
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, qb)
    return tuple(_to_bhsd(t, layout) for t in (dq, dk, dv))


attention_bwd_p = define("rlx_attention_backward", attention_backward_ref,
                         kind=K.AttentionBackward, multiple_results=True)


def _attention_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool],
                   **params: Any) -> list[Array]:
    return list(attention_bwd_p.bind(*primals, ct, **params))


attention_p = differentiable("rlx_attention", attention_ref, kind=K.Attention, linear=(0, 1, 2),
                             backward=_attention_bwd)


def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None = None, *,
              scale: float | None = None, causal: bool = False, layout: str = "BHSD") -> Array:
    """softmax(q·kᵀ·scale + mask)·v; scale defaults to 1/sqrt(D). One Attention node; its
    gradient is one AttentionBackward node (dq, dk, dv).

    q, k, v are [B, H, S, D] ("BHSD") or [B, S, H, D] ("BSHD"); rank-3 [B, S, D] operands are a
    single head (mask broadcastable to [B, Sq, Sk])."""
    q, k, v = promote(q, k, v)
    if layout not in ("BHSD", "BSHD"):
        raise ValueError(f"attention layout must be 'BHSD' or 'BSHD', got {layout!r}")
    if q.ndim == k.ndim == v.ndim == 3:
        if mask is not None and jnp.ndim(mask) == 3:
            mask = jnp.expand_dims(jnp.asarray(mask), 1)
        out = attention(q[:, None], k[:, None], v[:, None], mask, scale=scale, causal=causal,
                        layout="BHSD")
        return out[:, 0]
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"attention expects rank-4 q, k, v in layout {layout}, got shapes "
                         f"{q.shape}, {k.shape}, {v.shape}")
    scale = float(1.0 / q.shape[-1] ** 0.5 if scale is None else scale)
    operands: tuple[Array, ...]
    operands, kind = (q, k, v), "none"
    if mask is not None:
        mask = jnp.asarray(mask)
        kind = "bool" if mask.dtype == jnp.bool_ else "additive"
        operands += (mask if kind == "bool" else mask.astype(q.dtype),)
    return cast(Array, attention_p.bind(*operands, scale=scale, causal=bool(causal),
                                        layout=layout, mask_kind=kind))


# ---- Rope (rotate-half, or the pairs with traditional=True): formulas in nn/rotary.py ----
rope_bwd_p = define("rlx_rope_backward", rope_backward_ref, kind=K.RopeBackward, rows=(0,))


def _rope_bwd(ct: Array, primals: Sequence[Array], need: Sequence[bool],
              **attrs: Any) -> list[Array]:
    return [rope_bwd_p.bind(ct, *primals[1:], **attrs)]


rope_p = differentiable("rlx_rope", rope_ref, kind=K.Rope, linear=(0,), backward=_rope_bwd,
                        rows=(0,))


def rope(x: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, traditional: bool = False,
         seq_axis: int = -2) -> Array:
    """Rotary embedding: x[..., S, D] (or x[..., S, H, D] with seq_axis=-3), cos/sin[S, D/2]
    (rotate-half, or the pairs x[..., ::2], x[..., 1::2] with traditional=True) or [S, D]
    (rotate-half: x * cos + rotate_half(x) * sin)."""
    x, cos, sin = promote(x, cos, sin)
    if not rope_shapes_ok(x, (cos, sin), traditional, seq_axis):
        raise ValueError(f"rope expects x[..., S, D] with even D (S on axis {seq_axis}) and "
                         f"cos/sin[S, D/2] or [S, D]; got {x.shape}, {cos.shape}, {sin.shape}")
    return cast(Array, rope_p.bind(x, cos, sin, traditional=bool(traditional),
                                   seq_axis=int(seq_axis)))


def rope_tables(seq_len: int, dim: int, base: float = 10000.0,
                dtype: DTypeLike = jnp.float32) -> tuple[Array, Array]:
    """cos, sin tables [seq_len, dim/2] for `rope`."""
    inv = 1.0 / (base ** (jnp.arange(0, dim // 2, dtype=jnp.float32) * 2 / dim))
    ang = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv[None]
    return jnp.cos(ang).astype(dtype), jnp.sin(ang).astype(dtype)
