"""Collectives on mx.distributed (rlx_jax/distributed.py): AllReduce -> all_sum / all_max /
all_min, AllGather -> all_gather (which concatenates along axis 0: the gathered axis is moved
there and back), ReduceScatter -> all_sum and this rank's block (the ring backend has no
sum_scatter), AxisIndex -> this process's rank (a constant of its program), Ppermute -> an
all_gather and the block of this rank's source (zeros where it has none).

They are ordinary MLX ops, so they stay inside the one mx.compile'd program (mx.compile
accepts mx.distributed ops, checked with all_sum and all_gather on the ring backend): the
program is not split around them.
"""
import mlx.core as mx

from ... import distributed
from ...ir.ops import OpKind as K
from .table import mlx_rule

ALL_REDUCE = {"sum": mx.distributed.all_sum, "max": mx.distributed.all_max,
              "min": mx.distributed.all_min}


@mlx_rule(K.AllReduce)
def _all_reduce(ctx, node, x):
    return ALL_REDUCE[node.attrs["fn"]](x, group=distributed.group_for(node))


def all_gather(x, axis, tiled, group):
    """Members' x concatenated (tiled) or stacked along `axis`."""
    if not tiled:
        x = mx.expand_dims(x, axis)
    moved = mx.moveaxis(x, axis, 0) if axis else x
    out = mx.distributed.all_gather(moved, group=group)
    return mx.moveaxis(out, 0, axis) if axis else out


@mlx_rule(K.AllGather)
def _all_gather(ctx, node, x):
    return all_gather(x, node.attrs["axis"], node.attrs["tiled"], distributed.group_for(node))


@mlx_rule(K.ReduceScatter)
def _reduce_scatter(ctx, node, x):
    group, axis = distributed.group_for(node), node.attrs["axis"]
    total = mx.distributed.all_sum(x, group=group)
    block = x.shape[axis] // group.size()
    r = group.rank()
    part = mx.take(total, mx.arange(r * block, (r + 1) * block), axis=axis)
    return part if node.attrs["tiled"] else mx.squeeze(part, axis)


@mlx_rule(K.AxisIndex)
def _axis_index(ctx, node):
    return mx.array(distributed.group_for(node).rank(), dtype=mx.int32)


@mlx_rule(K.Ppermute)
def _ppermute(ctx, node, x):
    group = distributed.group_for(node)
    sources = [s for s, d in node.attrs["perm"] if d == group.rank()]
    everyone = all_gather(x, 0, False, group)        # every member takes part in the gather
    return everyone[sources[0]] if sources else mx.zeros_like(x)
