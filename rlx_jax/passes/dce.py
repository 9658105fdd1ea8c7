"""Dead-code elimination: drop nodes none of whose outputs reach a graph output."""
from ..ir.ops import OpKind


def dce(graph):
    live = {v.id for v in graph.outputs}
    kept = []
    for n in reversed(graph.nodes):
        if n.kind is OpKind.Input or any(o.id in live for o in n.outputs):
            kept.append(n)
            live.update(v.id for v in n.inputs)
    graph.nodes = kept[::-1]
    return graph
