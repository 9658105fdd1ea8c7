"""The rank <= 5 rewrite (passes/rank.py) inside control-flow regions: each region of an If / While /
Scan is a graph of its own and gets the same rewrite, so a jnp.tile in a scan body lowers as it
does at top level.

Given / Result (a scan body tiling f32[2,3,4] by (2,1,3)):
    region: Expand f32[2,2,1,3,3,4]; Reshape f32[4,3,12]
    ->  region: Expand f32[2,2,12]; Expand f32[4,3,3,4] (rank <= 5, as at top level)
"""
from ....ir.rewrite import copy_node, rewrite


def lower_region_ranks(graph, lower_rank):
    """`graph` with `lower_rank` applied to every region (the same graph when none changes)."""
    if not any(n.regions for n in graph.nodes):
        return graph

    def lower_regions(b, node, ins):
        if not node.regions:
            return None
        regions = tuple(lower_rank(r) for r in node.regions)
        if all(a is r for a, r in zip(regions, node.regions)):
            return None
        return copy_node(b, node, ins, regions)
    new, changed = rewrite(graph, lower_regions, "the rank rewrite of regions")
    return new.verify() if changed else graph
