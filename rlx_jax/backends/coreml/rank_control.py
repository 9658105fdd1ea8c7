"""The rank <= 5 rewrite (rank.py) inside control-flow regions: each region of an If / While /
Scan is a graph of its own and gets the same rewrite, so a jnp.tile in a scan body lowers as it
does at top level.

Given / Result (a scan body tiling f32[2,3,4] by (2,1,3)):
    region: Expand f32[2,2,1,3,3,4]; Reshape f32[4,3,12]
    ->  region: Expand f32[2,2,12]; Expand f32[4,3,3,4] (rank <= 5, as at top level)
"""
from ...ir.graph import Builder
from ...ir.ops import OpKind as K
from ...ir.rewrite import copy_node


def lower_region_ranks(graph, lower_rank):
    """`graph` with `lower_rank` applied to every region (the same graph when none changes)."""
    if not any(n.regions for n in graph.nodes):
        return graph
    new = {id(n): tuple(lower_rank(r) for r in n.regions) for n in graph.nodes if n.regions}
    if all(a is b for n in graph.nodes if n.regions for a, b in zip(new[id(n)], n.regions)):
        return graph
    b, env = Builder(graph.like()), {}
    for n in graph.nodes:
        outs = copy_node(b, n, [env[v.id] for v in n.inputs], new.get(id(n)))
        if n.kind is K.Input:
            b.graph.inputs.append(outs[0])
        for o, v in zip(n.outputs, outs):
            env[o.id] = v
    b.graph.outputs = [env[v.id] for v in graph.outputs]
    return b.graph.verify()
