"""Rotary embeddings as LLaMA-style JAX code writes them, recognised as Rope / RopeBackward
(generated patterns: passes/patterns.py traces these formulas and matches them exactly;
the kinds' semantics: nn/rotary.py).

The forms, x[..., D] (x[B, S, H, D] or x[B, H, S, D]), h = D/2, x1 = x[..., :h],
x2 = x[..., h:]:
  full-width tables [S, D] (HF / LLaMA): x * cos + rotate_half(x) * sin with
      rotate_half(x) = jnp.concatenate([-x[..., h:], x[..., :h]], -1) (or the halves of
      jnp.split(x, 2, -1): the same forward, another gradient)
  half-width tables [S, D/2]: jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
  the pairs (GPT-J, "traditional"), tables [S, D/2], x1 = x[..., ::2], x2 = x[..., 1::2]:
      jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)
the tables with x's rank or fewer axes, size 1 but on one axis besides the last: that axis
becomes the node's seq_axis ([S, D] against x[..., S, D]: -2; [S, 1, D] against
x[B, S, H, D]: -3; [1, 1, S, D] ...), or with x's rank and rows per batch element
([B, S, 1, D], HF's flax LLaMA: its table gathered by position_ids), taken as they are; and
each form's jax.vjp in x (the tables constant) as RopeBackward. Tables that broadcast x to a
larger shape are left alone.

When the tables are cos / sin of positions * inverse frequencies computed in the program
(TABLES: `pos[:, None] * inv_freq[None, :]`, `jnp.outer` or `jnp.einsum("i,j->ij", ...)`,
concatenated with itself for the full width) and the positions are `arange(S)` (an iota, or
an integer iota cast to float32), the node takes inv_freq itself (the frequency form, which
MLX lowers with mx.fast.rope); otherwise it takes the tables as they are. equinox's
nn.RotaryPositionalEmbedding (theta 10000) on each head of a batch bakes its tables into the
program as constants: its own code is the template, and the frequency form its inv_freq.
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

from ..ir.ops import OpKind as K
from ..nn.rotary import rope_shapes_ok
from .patterns import Pattern, Reference, match

F32 = np.float32
X = (2, 3, 5, 8)


# ---- the forms: fn(x, cos, sin) -> (y,) ----
def _full(x, cos, sin):
    h = x.shape[-1] // 2
    return (x * cos + jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin,)


def _full_split(x, cos, sin):
    """The halves by jnp.split: the same forward, another gradient (its transpose a Concat)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return (x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin,)


def _half(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return (jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1),)


def _pairs(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return (jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape),)


def _with_vjp(form):
    """(y, dx): the form and its cotangent in x for the cotangent dy (the tables constant)."""
    def joint(x, cos, sin, dy):
        y, pull = jax.vjp(lambda v: form(v, cos, sin)[0], x)
        return (y, *pull(dy))
    return joint


def _example(width):
    """Template r: tables [S, W] (r = 2, broadcast through an Expand) or of x's rank (r = 4)."""
    def example(r):
        t = (5, width) if r == 2 else (1, 1, 5, width)
        return {"x": (X, F32), "cos": (t, F32), "sin": (t, F32), "dy": (X, F32)}
    return example


def _fill_x(bound):
    x = bound.get("x", bound.get("dy"))
    return None if x is None else {"x": x, "dy": x}


def _fill(bound):
    """x and dy have one type (the backward's match binds dy, not x); cos, sin must be bound."""
    x = bound.get("x", bound.get("dy"))
    if x is None or "cos" not in bound or "sin" not in bound:
        return None
    return {"x": x, "dy": x, **bound}


FORMS = {   # key: (name, formula, table width, traditional)
    "rope_full": ("x * cos + rotate_half(x) * sin", _full, 8, False),
    "rope_full_split": ("x * cos + rotate_half(x) * sin, jnp.split halves", _full_split, 8,
                        False),
    "rope_half": ("concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin])", _half, 4, False),
    "rope_pairs": ("stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos]) of x[::2], x[1::2]",
                   _pairs, 4, True),
}
R = {}
for _key, (_name, _fn, _width, _) in FORMS.items():
    _kw = dict(ranks=(2, 4), trigger={(K.Concat, None)})
    R[_key] = Reference(f"rope {_name}", _fn, ("x", "cos", "sin"), _example(_width), **_kw)
    R[_key + "_vjp"] = Reference(f"vjp(rope {_name})", _with_vjp(_fn), ("x", "cos", "sin", "dy"),
                                 _example(_width), fill=_fill, **_kw)


# ---- equinox nn.RotaryPositionalEmbedding(D) (theta 10000) on each head of a batch: its
# tables are constants (computed at trace time), so its match binds x alone ----
def _eqx(bshd):
    """The module vmapped over the heads (axis 1 of x[S, H, D], or axis 0 of x[H, S, D]) and
    the batch, as attention code calls it. equinox caches its tables per (size, dtype) in a
    module global, whatever the theta: the template is traced with that cache emptied, so its
    constants are theta 10000's and the exact match compares the user's with them."""
    def fn(x):
        import equinox as eqx
        cache = sys.modules[eqx.nn.RotaryPositionalEmbedding.__module__] \
            .internal_rope_embedding_cache
        saved = dict(cache)
        cache.clear()
        try:
            rope = eqx.nn.RotaryPositionalEmbedding(x.shape[-1])
            per_sequence = jax.vmap(rope, in_axes=1, out_axes=1) if bshd else jax.vmap(rope)
            return (jax.vmap(per_sequence)(x),)
        finally:
            cache.clear()
            cache.update(saved)
    return fn


def _eqx_example(bshd):
    shape = (2, 5, 3, 8) if bshd else X
    return lambda r: {"x": (shape, F32), "dy": (shape, F32)}


for _bshd in (True, False):
    _key, _kw = f"eqx_{'bshd' if _bshd else 'bhsd'}", dict(ranks=(4,), trigger={(K.Concat, None)})
    _name = f"equinox RotaryPositionalEmbedding(theta=10000) ({_key[4:]})"
    R[_key] = Reference(_name, _eqx(_bshd), ("x",), _eqx_example(_bshd), **_kw)
    R[_key + "_vjp"] = Reference(f"vjp({_name})",
                                 lambda x, dy, _f=_eqx(_bshd): _with_vjp(
                                     lambda v, c, s: _f(v))(x, None, None, dy),
                                 ("x", "dy"), _eqx_example(_bshd), fill=_fill_x, **_kw)


def _eqx_replace(kind, seq_axis):
    """Rope's frequency form with equinox's inv_freq, computed by its own expression (the same
    float32 values); one Constant per D in the graph, which every node shares."""
    def replace(b, o, p, root):
        x = o["x"] if kind is K.Rope else o["dy"]
        d = x.shape[-1]
        if root.shape != x.shape or x.dtype != F32 or d % 2:
            return None
        memo = b.__dict__.setdefault("rope_inv_freq", {})
        if d not in memo:
            with jax.ensure_compile_time_eval():
                memo[d] = b.const(np.asarray(1.0 / (10000.0 ** (jnp.arange(0.0, d, 2) / d)),
                                             F32))
        return b.add(kind, (x, memo[d]), {"traditional": False, "seq_axis": seq_axis})
    return replace


# ---- the tables from positions and inverse frequencies: fn(pos, inv) -> (cos, sin) ----
def _tables(product, full):
    def fn(pos, inv):
        f = pos[:, None] * inv[None, :] if product == "mul" else \
            jnp.einsum("i,j->ij", pos, inv)
        f = jnp.concatenate([f, f], axis=-1) if full else f
        return jnp.cos(f), jnp.sin(f)
    return fn


TABLES = []
for _product in ("mul", "einsum"):
    for _full_width in (False, True):
        _ref = Reference(f"rope tables cos/sin(pos * inv_freq, {_product}"
                         f"{', twice' if _full_width else ''})", _tables(_product, _full_width),
                         ("pos", "inv"), lambda r: {"pos": ((6,), F32), "inv": ((4,), F32)},
                         ranks=(1,))
        TABLES.append((Pattern(_ref, 0, None), Pattern(_ref, 1, None)))


def _table_axis(x, t):
    """The axis of x (negative) a broadcast table's rows run along, or None."""
    if t.ndim > x.ndim or t.ndim < 2:
        return None
    full = (1,) * (x.ndim - t.ndim) + tuple(t.shape)
    axes = [a for a in range(-x.ndim, -1) if full[a] != 1]
    if not axes:                  # one row: any axis of x of size 1 (decoding one token)
        return next((a for a in range(-2, -x.ndim - 1, -1) if x.shape[a] == 1), None)
    if len(axes) != 1 or axes[0] > -2 or full[axes[0]] != x.shape[axes[0]]:
        return None
    return axes[0]


def _unbroadcast(v):
    """v without the producers that only insert size-1 axes (Reshape, Expand of one size)."""
    while v.node is not None and v.node.kind in (K.Reshape, K.Expand) and \
            v.node.inputs[0].size == v.size:
        v = v.node.inputs[0]
    return v


def _is_arange(v, n):
    """v is arange(n): a float32 iota, or an integer iota cast to float32."""
    if v.dtype != F32 or v.shape != (n,):
        return False
    if v.node is not None and v.node.kind is K.Cast and v.node.inputs[0].dtype.kind in "iu":
        v = v.node.inputs[0]
    return v.node is not None and v.node.kind is K.Iota and v.node.attrs["dimension"] == 0


def _frequencies(cos, sin, seq):
    """(inv_freq,) when cos / sin are TABLES at positions arange(seq), else None."""
    cos, sin = _unbroadcast(cos), _unbroadcast(sin)
    if cos.dtype != F32:
        return None
    for pc, ps in TABLES:
        got_c, got_s = match(pc, cos, frozenset()), match(ps, sin, frozenset())
        if got_c is None or got_s is None:
            continue
        (bc, bs) = got_c[0], got_s[0]
        if bc["pos"] is bs["pos"] and bc["inv"] is bs["inv"] and _is_arange(bc["pos"], seq):
            return (bc["inv"],)
    return None


def _replace(kind, traditional):
    def replace(b, o, p, root):
        x = o["x"] if kind is K.Rope else o["dy"]
        cos, sin = o["cos"], o["sin"]
        axis = _table_axis(x, cos)
        if root.shape != x.shape or cos.shape != sin.shape:
            return None
        if axis is None:              # rows per batch element ([B, S, 1, W]): as they are
            tables, axis = (cos, sin), -2
            return b.add(kind, (x, *tables), {"traditional": traditional, "seq_axis": axis}) \
                if rope_shapes_ok(x, tables, traditional, axis) else None
        seq, width = x.shape[axis], cos.shape[-1]
        for tables in (_frequencies(cos, sin, seq), (cos, sin)):
            if tables is None:
                continue
            tables = tuple(b.reshape(_unbroadcast(t), (seq, width)) for t in tables) \
                if len(tables) == 2 else tables
            if rope_shapes_ok(x, tables, traditional, axis):
                return b.add(kind, (x, *tables), {"traditional": traditional, "seq_axis": axis})
        return None
    return replace


# reference, output, replacement: equinox's module first (its constants), then each form
# alone and with its jax.vjp
ROPE_PATTERNS = [
    pat for key, axis in (("eqx_bshd", -3), ("eqx_bhsd", -2)) for pat in (
        Pattern(R[key], 0, _eqx_replace(K.Rope, axis)),
        Pattern(R[key + "_vjp"], 0, _eqx_replace(K.Rope, axis)),
        Pattern(R[key + "_vjp"], 1, _eqx_replace(K.RopeBackward, axis)))] + [
    pat for key, (_, _, _, trad) in FORMS.items() for pat in (
        Pattern(R[key], 0, _replace(K.Rope, trad)),
        Pattern(R[key + "_vjp"], 0, _replace(K.Rope, trad)),
        Pattern(R[key + "_vjp"], 1, _replace(K.RopeBackward, trad)))]
