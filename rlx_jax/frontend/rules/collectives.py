"""Collectives over the named axis of rlx_jax.jit(axis_name=...), which spans the processes of
rlx_jax.distributed (psum, pmax, pmin, all_gather, reduce_scatter, axis_index, ppermute).

jax.make_jaxpr binds that one name (its axis_env), so every named axis left in the jaxpr is it;
pmean arrives as psum and a div by the group size. Refused, naming the user's line:
axis_index_groups, positional (vmap) axes mixed with named ones in a collective (positional
axes alone, a psum/pmax/pmin batched by jax.vmap, reduce within the array), and an axis size
that is not the group's.

Given / Result (`lax.pmean(x, "batch")` on 2 processes):
    b = psum[axes=('batch',) axis_index_groups=None] a ; c = div b 2.0
    -> %1 = AllReduce[fn=sum, axis_name=batch, axis_size=2] %0 ; %2 = Binary[fn=div] %1, 2.0
"""
from ... import distributed
from ...errors import UnsupportedPrimitiveError
from ...ir.ops import OpKind as K
from . import jaxpr_rule


def _axis(name, axes, axis_index_groups=None, axis_size=None):
    """(axis_name, group size) of a collective over `axes`, or None for no named axis."""
    if axis_index_groups is not None:
        raise UnsupportedPrimitiveError(
            f"{name} with axis_index_groups is not supported: collectives run over the whole "
            f"group of processes; drop axis_index_groups")
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    if any(not isinstance(a, str) for a in axes):
        raise UnsupportedPrimitiveError(
            f"{name} over positional axes {axes} (a collective under jax.vmap reducing a mapped "
            f"axis) is not supported; reduce those axes with jnp first")
    names = sorted(set(axes))
    if not names:
        return None
    if len(names) > 1:
        raise UnsupportedPrimitiveError(
            f"{name} over several axis names {names}: rlx_jax binds one axis, the jit's "
            f"axis_name")
    size = distributed.size()
    if axis_size is not None and axis_size != size:
        raise UnsupportedPrimitiveError(
            f"{name} over axis {names[0]!r} of size {axis_size}, but the process group has "
            f"{size} process(es): the mesh must be the whole group")
    return {"axis_name": names[0], "axis_size": size}


def _all_reduce(fn):
    def rule(ctx, *xs, axes, axis_index_groups=None, **params):
        axes = axes if isinstance(axes, (tuple, list)) else (axes,)
        if axes and all(isinstance(a, int) for a in axes) and axis_index_groups is None:
            # only positional axes: a vmapped axis (the batched form of a psum over a
            # jax.vmap's axis name), reduced within the array
            return [ctx.b.reduce(fn, x, axes) for x in xs]
        attrs = _axis(ctx.eqn.primitive.name, axes, axis_index_groups)
        if attrs is None:
            return list(xs)
        return [ctx.b.add(K.AllReduce, (x,), dict(attrs, fn=fn), out=[(x.shape, x.dtype)])
                for x in xs]
    return rule


for _prim, _fn in (("psum", "sum"), ("pmax", "max"), ("pmin", "min")):
    jaxpr_rule(_prim)(_all_reduce(_fn))


@jaxpr_rule("all_gather")
def _all_gather(ctx, x, *, all_gather_dimension, axis_name, axis_index_groups, axis_size,
                tiled, **params):
    attrs = _axis("all_gather", axis_name, axis_index_groups, axis_size)
    return ctx.emit(K.AllGather, (x,), axis=int(all_gather_dimension), tiled=bool(tiled),
                    **attrs)


@jaxpr_rule("reduce_scatter")
def _reduce_scatter(ctx, x, *, scatter_dimension, axis_name, axis_index_groups, axis_size,
                    tiled, **params):
    attrs = _axis("psum_scatter", axis_name, axis_index_groups, axis_size)
    return ctx.emit(K.ReduceScatter, (x,), axis=int(scatter_dimension), tiled=bool(tiled),
                    **attrs)


@jaxpr_rule("axis_index")
def _axis_index(ctx, *, axis_name, **params):
    return ctx.emit(K.AxisIndex, (), **_axis("axis_index", axis_name))


@jaxpr_rule("ppermute")
def _ppermute(ctx, x, *, axis_name, perm, **params):
    attrs = _axis("ppermute", axis_name)
    return ctx.emit(K.Ppermute, (x,), perm=tuple((int(s), int(d)) for s, d in perm), **attrs)
