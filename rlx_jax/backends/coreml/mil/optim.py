"""Native MIL for the optimizer-update kinds AdamUpdate and LionUpdate (semantics:
ir/reference_optim.py).

AdamUpdate updates its leaves in batches: the leaves of at most BATCH_ELEMENTS elements are
flattened and concatenated (one 1-d vector per operand), updated by one chain of 14 elementwise
ops, and split back; larger leaves get a chain of their own. A small leaf's update is bound by
per-op dispatch, not by memory traffic, so one chain over all of them replaces 14 ops per leaf
by 14 ops in all plus a concat per operand and a split per result (and a reshape per leaf of
rank other than 1 on the way in and out); a large leaf would pay for the copies. The bias
corrections 1 - b^count' are computed once per node (8 scalar ops).
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....ir.reference_optim import adam_leaves
from .elementwise import jax_sign
from .legality import mil_dtype_name
from .table import mil_rule

BATCH_ELEMENTS = 1 << 16


def _increment(ctx, count):
    """count + 1, saturating at the int32 maximum (optax.safe_increment)."""
    mb = ctx.mb
    top = ctx.like(np.iinfo(np.int32).max, count)
    return mb.select(cond=mb.less(x=count, y=top), a=mb.add(x=count, y=ctx.like(1, count)),
                     b=top)


def _corrections(ctx, count, a):
    """(count', 1 - b1^count', 1 - b2^count') as MIL scalars."""
    mb = ctx.mb
    step = _increment(ctx, count)
    steps = mb.cast(x=step, dtype="fp32")
    return (step,) + tuple(mb.sub(x=ctx.like(1.0, steps),
                                  y=mb.pow(x=ctx.like(a[b], steps), y=steps))
                           for b in ("b1", "b2"))


def _dtypes(ctx, p, mu):
    """({p: its MIL dtype, mu: its}, the wider of the two, in which JAX computes what mixes
    them)."""
    name = {v: mil_dtype_name(ctx.np_dtype(v)) for v in (p, mu)}
    return name, "fp32" if "fp32" in name.values() else name[p]


def _to(ctx, var, dtype):
    return var if mil_dtype_name(ctx.np_dtype(var)) == dtype else ctx.mb.cast(x=var, dtype=dtype)


def _mix(ctx, b, g, mu, wide):
    """(1 - b)·g + b·mu (each product in its operand's dtype), in dtype `wide`."""
    mb = ctx.mb
    return mb.add(x=_to(ctx, mb.mul(x=ctx.like(1 - b, g), y=g), wide),
                  y=_to(ctx, mb.mul(x=ctx.like(b, mu), y=mu), wide))


def _chain(ctx, a, p, g, mu, nu, bc, size=None):
    """(p', mu', nu') of one leaf or one batch of leaves: optax's formulas, 14 ops (16 with
    adamw's weight decay). Where mu is stored in another dtype than p (optax's mu_dtype) the
    first moment and the update are computed in the wider of the two, as JAX promotes them,
    with casts to and from it. bc: the bias corrections and the step size (float32 scalars,
    cast once per dtype: `Scalars`)."""
    mb = ctx.mb
    name, wide = _dtypes(ctx, p, mu)

    def to(var, dtype):
        return _to(ctx, var, dtype)
    m = _mix(ctx, a["b1"], g, mu, wide)
    v = mb.add(x=mb.mul(x=ctx.like(1 - a["b2"], p), y=mb.mul(x=g, y=g)),
               y=mb.mul(x=ctx.like(a["b2"], p), y=nu))
    vhat = mb.real_div(x=v, y=bc.get("bc2", name[p]))
    if a["eps_root"]:
        vhat = mb.add(x=vhat, y=ctx.like(a["eps_root"], p))
    den = to(mb.add(x=mb.sqrt(x=vhat), y=ctx.like(a["eps"], p)), wide)
    u = mb.real_div(x=mb.real_div(x=m, y=bc.get("bc1", wide)), y=den)
    if a["weight_decay"]:
        u = mb.add(x=u, y=mb.mul(x=ctx.like(a["weight_decay"], u), y=to(p, wide)))
    scale = ctx.like(-a["lr"], u) if size is None else bc.get("size", wide)   # a schedule
    new_p = to(mb.add(x=to(p, wide), y=mb.mul(x=scale, y=u)), name[p])
    return new_p, to(m, name[mu]), v


def _flat(ctx, var, shape):
    return var if len(shape) == 1 else ctx.mb.reshape(x=var, shape=ctx.ints([int(np.prod(shape))]))


def _unflat(ctx, var, shape):
    return var if len(shape) == 1 else ctx.mb.reshape(x=var, shape=ctx.ints(shape))


def _batched(ctx, a, leaves, shapes, bc, size):
    """Results (p', mu', nu') per leaf of the leaves updated in one batch."""
    mb = ctx.mb
    if len(shapes) == 1:
        return [_chain(ctx, a, *leaves[0], bc, size)]
    sizes = [int(np.prod(s)) for s in shapes]
    cat = [mb.concat(values=[_flat(ctx, leaf[i], s) for leaf, s in zip(leaves, shapes)], axis=0)
           for i in range(4)]
    outs = [mb.split(x=r, split_sizes=ctx.ints(sizes), axis=0)
            for r in _chain(ctx, a, *cat, bc, size)]
    return [tuple(_unflat(ctx, out[j], s) for out in outs) for j, s in enumerate(shapes)]


class Scalars:
    """Named float32 MIL scalars, each cast to a dtype once however many leaves ask for it."""

    def __init__(self, ctx, **values):
        self.ctx, self.values, self.made = ctx, values, {}

    def get(self, name, dtype):
        if (name, dtype) not in self.made:
            v = self.values[name]
            self.made[(name, dtype)] = v if dtype == "fp32" else \
                self.ctx.mb.cast(x=v, dtype=dtype)
        return self.made[(name, dtype)]


@mil_rule(K.AdamUpdate)
def _adam_update(ctx, node, count, *operands):
    a = node.attrs
    _, size, ps, gs, mus, nus = adam_leaves((count,) + operands, a["lr"])
    step, bc1, bc2 = _corrections(ctx, count, a)
    bc = Scalars(ctx, bc1=bc1, bc2=bc2, size=size)
    first = 1 if size is None else 2                  # the leaves' p operands
    shapes = [v.shape for v in node.inputs[first:first + len(ps)]]
    leaves = list(zip(ps, gs, mus, nus))
    small = [i for i, s in enumerate(shapes) if int(np.prod(s)) <= BATCH_ELEMENTS]
    results = [None] * len(ps)
    if small:
        for i, r in zip(small, _batched(ctx, a, [leaves[i] for i in small],
                                        [shapes[i] for i in small], bc, size)):
            results[i] = r
    for i in range(len(ps)):
        if results[i] is None:
            results[i] = _chain(ctx, a, *leaves[i], bc, size)
    return (step,) + tuple(r[j] for j in range(3) for r in results)


@mil_rule(K.LionUpdate)
def _lion_update(ctx, node, *operands):
    """Per leaf: u = sign((1 - b1)·g + b1·mu) + wd·p, mu' = (1 - b2)·g + b2·mu, p' = p +
    (-lr)·u, computed in the wider of p's and mu's dtypes (optax's mu_dtype): 11 ops."""
    mb, a = ctx.mb, node.attrs
    _, size, ps, gs, mus = adam_leaves((None,) + operands, a["lr"], states=1)
    scalars, new_p, new_mu = Scalars(ctx, size=size), [], []
    for p, g, mu in zip(ps, gs, mus):
        name, wide = _dtypes(ctx, p, mu)
        u = mb.add(x=jax_sign(ctx, _mix(ctx, a["b1"], g, mu, wide)),
                   y=_to(ctx, mb.mul(x=ctx.like(a["weight_decay"], p), y=p), wide))
        scale = ctx.like(-a["lr"], u) if size is None else scalars.get("size", wide)
        new_p.append(_to(ctx, mb.add(x=_to(ctx, p, wide), y=mb.mul(x=scale, y=u)), name[p]))
        new_mu.append(_to(ctx, _mix(ctx, a["b2"], g, mu, wide), name[mu]))
    return (*new_p, *new_mu)
