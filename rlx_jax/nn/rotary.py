"""The semantics of the Rope / RopeBackward kinds (docs/high-level-kinds.md): jnp reference
formulas shared by `rlx_jax.nn.rope`, the IR reference, the decompositions and the recognised
forms (passes/pattern_rope.py).

Operands: x[..., D] and either the tables cos, sin [S, D/2] (the two halves, or the pairs,
share them) or [S, D] (rotate-half only: the lower half of the output reads the tables' first
half, the upper half their second, which is `x * cos + rotate_half(x) * sin` for any tables),
each also as a table of x's rank broadcast against x[..., W] (rows per batch element:
[B, S, 1, W] against x[B, S, H, D]), or one frequency vector inv_freq [D/2], the tables then
being cos / sin of `arange(S)[:, None] * inv_freq[None, :]` computed in inv_freq's dtype.
Attributes: `traditional` (rotate the pairs x[..., 0::2], x[..., 1::2] instead of the halves;
half-width tables or frequencies only) and `seq_axis` (the negative axis of x the rows of a
[S, W] table run along: -2 for x[..., S, D], -3 for x[..., S, H, D]).
"""
import jax.numpy as jnp


def rope_angles(x, inv_freq, seq_axis=-2):
    """cos, sin [S, D/2] of arange(S)[:, None] * inv_freq[None, :], S = x.shape[seq_axis]."""
    ang = jnp.arange(x.shape[seq_axis], dtype=inv_freq.dtype)[:, None] * inv_freq[None, :]
    return jnp.cos(ang), jnp.sin(ang)


def rope_tables_of(x, tables, seq_axis):
    """(cos, sin) from the operands after x: the two tables, or the frequency vector."""
    return rope_angles(x, tables[0], seq_axis) if len(tables) == 1 else tuple(tables)


def _lift(t, seq_axis):
    """A table [S, W] as [S, 1, ..., 1, W], its rows on x's axis seq_axis."""
    if t.ndim != 2:
        return t
    return t.reshape(t.shape[:1] + (1,) * (-seq_axis - 2) + t.shape[1:])


def rope_ref(x, *tables, traditional=False, seq_axis=-2):
    cos, sin = (_lift(t, seq_axis) for t in rope_tables_of(x, tables, seq_axis))
    h = x.shape[-1] // 2
    if traditional:
        x1, x2 = x[..., ::2], x[..., 1::2]
        return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)
    x1, x2 = x[..., :h], x[..., h:]
    if cos.shape[-1] != h:        # full width: the same values as the halves' formula
        return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_backward_ref(dy, *tables, traditional=False, seq_axis=-2):
    """The transpose of Rope in x: the rotation by the negated angles; with full-width tables
    the halves of sin trade places (dx_lo = dy_lo·c_lo + dy_hi·s_hi, dx_hi = dy_hi·c_hi −
    dy_lo·s_lo)."""
    cos, sin = rope_tables_of(dy, tables, seq_axis)
    h = dy.shape[-1] // 2
    if sin.shape[-1] != h:
        sin = jnp.concatenate([sin[..., h:], sin[..., :h]], axis=-1)
    return rope_ref(dy, cos, -sin, traditional=traditional, seq_axis=seq_axis)


def rope_shapes_ok(x, tables, traditional, seq_axis):
    """Whether the operands have the types the kind takes (see the module doc)."""
    d = x.shape[-1]
    if d % 2 or not -x.ndim <= seq_axis <= -2:
        return False
    if len(tables) == 1:
        return tables[0].shape == (d // 2,) and tables[0].dtype == x.dtype
    cos, sin = tables
    widths = (d // 2,) if traditional else (d // 2, d)
    if cos.shape != sin.shape or cos.shape[-1] not in widths or \
            not cos.dtype == sin.dtype == x.dtype:
        return False
    if cos.ndim == 2:
        return cos.shape[0] == x.shape[seq_axis]
    return cos.ndim == x.ndim and all(c in (1, n) for c, n in zip(cos.shape, x.shape[:-1]))
