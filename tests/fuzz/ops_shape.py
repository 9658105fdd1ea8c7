"""Shape generators: reshape, transpose, broadcast_to, slicing, concatenate/stack, pad (jnp and
lax with negative and interior padding), squeeze/expand_dims, flip, tile. They move values
without arithmetic, so they keep exactness."""
import numpy as np

from .generate import Reject
from .registry import op


def _any(ctx, pred=lambda v: True):
    a = ctx.operand(pred=pred)
    return a, ctx.v(a)


def _factor(ctx, size, rank):
    """A random shape of `rank` with `size` elements (a 0 somewhere when size is 0)."""
    if size == 0:
        dims = [int(ctx.r.integers(1, 4)) for _ in range(rank)]
        dims[int(ctx.r.integers(0, rank))] = 0
        return dims
    dims = [1] * rank
    n = size
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            dims[int(ctx.r.integers(0, rank))] *= p
            n //= p
    dims[int(ctx.r.integers(0, rank))] *= n
    return dims


@op("reshape", "shape", 2.0)
def _reshape(ctx):
    a, v = _any(ctx)
    size = int(np.prod(v.shape, dtype=np.int64))
    rank = int(ctx.r.integers(1 if size == 0 else 0, 5))
    dims = _factor(ctx, size, rank) if rank else []
    if dims and size and ctx.r.random() < 0.3:
        dims[int(ctx.r.integers(0, len(dims)))] = -1
    form = "{0}.reshape(%r)" if ctx.r.random() < 0.6 else "jnp.reshape({0}, %r)"
    return form % (tuple(dims),), [a], v.exact


@op("transpose", "shape", 1.5)
def _transpose(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) >= 2)
    if len(v.shape) == 2 and ctx.r.random() < 0.3:
        return "{0}.T", [a], v.exact
    perm = tuple(int(i) for i in ctx.r.permutation(len(v.shape)))
    return f"jnp.transpose({{0}}, {perm!r})", [a], v.exact


@op("broadcast_to", "shape", 1.0)
def _broadcast_to(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) <= 3)
    lead = tuple(ctx.dim() for _ in range(int(ctx.r.integers(0, 5 - len(v.shape)))))
    body = tuple(ctx.dim(allow_zero=False) if d == 1 and ctx.r.random() < 0.5 else d
                 for d in v.shape)
    return f"jnp.broadcast_to({{0}}, {lead + body!r})", [a], v.exact


def _slice_text(ctx, d):
    kind = ctx.r.random()
    if kind < 0.25:
        return ":"
    lo = int(ctx.r.integers(-d - 1, d + 2)) if ctx.r.random() < 0.7 else None
    hi = int(ctx.r.integers(-d - 1, d + 2)) if ctx.r.random() < 0.7 else None
    step = None if kind < 0.6 else int(ctx.choice((2, 3, -1, -2)))
    parts = ["" if lo is None else str(lo), "" if hi is None else str(hi)]
    return ":".join(parts) + ("" if step is None else f":{step}")


@op("slice", "shape", 2.0)
def _slice(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) >= 1)
    if ctx.r.random() < 0.25:
        starts = [int(ctx.r.integers(0, d + 1)) for d in v.shape]
        limits = [int(ctx.r.integers(s, d + 1)) for s, d in zip(starts, v.shape)]
        strides = [int(ctx.r.integers(1, 3)) for _ in v.shape]
        return f"lax.slice({{0}}, {tuple(starts)!r}, {tuple(limits)!r}, {tuple(strides)!r})", \
            [a], v.exact
    n = int(ctx.r.integers(1, len(v.shape) + 1))
    idx = ", ".join(_slice_text(ctx, d) for d in v.shape[:n])
    return "{0}[%s]" % idx, [a], v.exact


@op("concatenate", "shape", 1.5)
def _concatenate(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) >= 1)
    axis = int(ctx.r.integers(0, len(v.shape)))
    if ctx.r.random() < 0.3:            # stack: same shape, new axis
        b = ctx.pick(lambda w: w.shape == v.shape and w.dtype == v.dtype, fresh=0.5) \
            or ctx.new_input(v.shape, v.dtype)
        return f"jnp.stack([{{0}}, {{1}}], axis={axis})", [a, b], v.exact and ctx.v(b).exact
    shape = list(v.shape)
    shape[axis] = ctx.dim()
    b = ctx.pick(lambda w: len(w.shape) == len(v.shape) and w.dtype == v.dtype and all(
        x == y for i, (x, y) in enumerate(zip(w.shape, v.shape)) if i != axis), fresh=0.5) \
        or ctx.new_input(shape, v.dtype)
    args = [a, b] if ctx.r.random() < 0.5 else [b, a]
    return f"jnp.concatenate([{{0}}, {{1}}], axis={axis})", args, \
        v.exact and ctx.v(b).exact


@op("pad", "shape", 1.0)
def _pad(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) >= 1)
    widths = tuple((int(ctx.r.integers(0, 3)), int(ctx.r.integers(0, 3))) for _ in v.shape)
    mode = ctx.choice(("constant", "constant", "edge"))
    if mode == "edge" and 0 in v.shape:
        raise Reject("edge padding of an empty axis")
    if mode == "constant" and ctx.r.random() < 0.5:
        value = "True" if v.dtype == "bool" else ("1.5" if "float" in v.dtype else "2")
        return f"jnp.pad({{0}}, {widths!r}, constant_values={value})", [a], v.exact
    return f"jnp.pad({{0}}, {widths!r}, mode={mode!r})", [a], v.exact


@op("lax_pad", "shape", 1.0)
def _lax_pad(ctx):
    """lax.pad: negative (cropping) low/high and interior padding."""
    a, v = _any(ctx, lambda v: len(v.shape) >= 1)
    cfg = []
    for d in v.shape:
        interior = int(ctx.r.integers(0, 3)) if ctx.r.random() < 0.4 else 0
        full = d + max(d - 1, 0) * interior
        lo, hi = (int(ctx.r.integers(-min(full, 2), 3)) for _ in range(2))
        if full + lo + hi < 0:
            lo, hi = 0, 0
        cfg.append((lo, hi, interior))
    return f"lax.pad({{0}}, jnp.zeros((), {{0}}.dtype), {tuple(cfg)!r})", [a], v.exact


@op("squeeze", "shape", 1.0)
def _squeeze(ctx):
    a, v = _any(ctx, lambda v: 1 in v.shape)
    ones = [i for i, d in enumerate(v.shape) if d == 1]
    axes = tuple(sorted(int(i) for i in ctx.r.choice(ones, int(ctx.r.integers(1, len(ones) + 1)),
                                                     replace=False)))
    return f"jnp.squeeze({{0}}, axis={axes!r})", [a], v.exact


@op("expand_dims", "shape", 1.0)
def _expand_dims(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) <= 3)
    axis = int(ctx.r.integers(-len(v.shape) - 1, len(v.shape) + 1))
    if ctx.r.random() < 0.3:
        idx = ", ".join([":"] * int(ctx.r.integers(0, len(v.shape) + 1)) + ["None"])
        return "{0}[%s]" % idx, [a], v.exact
    return f"jnp.expand_dims({{0}}, {axis})", [a], v.exact


@op("flip", "shape", 1.0)
def _flip(ctx):
    a, v = _any(ctx, lambda v: len(v.shape) >= 1)
    axis = int(ctx.r.integers(0, len(v.shape)))
    if ctx.r.random() < 0.3:
        return "jnp.flip({0})", [a], v.exact
    return f"jnp.flip({{0}}, axis={axis})", [a], v.exact


@op("tile", "shape", 0.5)
def _tile(ctx):
    a, v = _any(ctx, lambda v: 1 <= len(v.shape) <= 3)
    reps = tuple(int(ctx.r.integers(1, 4)) for _ in range(int(ctx.r.integers(1, len(v.shape) + 2))))
    return f"jnp.tile({{0}}, {reps!r})", [a], v.exact
