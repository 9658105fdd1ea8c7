"""The one rewrite driver: walk a graph in order and rebuild it, node by node; and dead-code
elimination. Legalization, recognition and the backends' graph passes all go through here.

`rewrite(graph, rule)` calls `rule(b, node, inputs)` for every node but the graph's Inputs, where
`b` is a Builder over the new graph (its `src` set to the node's source line) and `inputs` are the
node's operands as values of the new graph (`b.value_of(v)` maps any earlier value of the old
graph, for rules that match a subgraph). The rule returns None to keep the node (it is copied
onto `inputs`) or its replacement: a value, or a tuple of them for a multi-output node, each of
the type of the output it replaces. A node's regions (`Node.regions`, the sub-graphs of control
flow) are rewritten with the same rule before the node itself is looked at.
"""
from .. import progress
from ..errors import IRTypeError
from .graph import Builder, Node, Value
from .ops import OpKind


def copy_node(b, node, inputs, regions=None):
    """Appends a copy of `node` on `inputs` to `b`'s graph; returns its outputs."""
    new = Node(node.kind, inputs, node.attrs, node.src,
               node.regions if regions is None else regions)
    new.outputs = tuple(Value(o.shape, o.dtype, new, i) for i, o in enumerate(node.outputs))
    b.graph.nodes.append(new)
    return new.outputs


def rewrite(graph, rule, what="rewrite", top=True):
    """Returns (the rebuilt graph, how many nodes `rule` replaced). See the module docstring.
    A long rewrite of a large graph shows progress (progress.py) named `what`."""
    b = Builder(graph.like())
    env, replaced = {}, 0
    b.value_of = lambda v: env[v.id]
    for n in progress.bar(graph.nodes, what) if top else graph.nodes:
        ins = [env[v.id] for v in n.inputs]
        if n.kind is OpKind.Input:
            outs = copy_node(b, n, ins)
            b.graph.inputs.append(outs[0])
        else:
            regions = None
            if n.regions:
                subs = [rewrite(r, rule, what, False) for r in n.regions]
                replaced += sum(count for _, count in subs)
                regions = tuple(g for g, _ in subs)
            b.src = n.src
            res = rule(b, n, ins) if not regions else rule(b, _with_regions(n, regions), ins)
            if res is None:
                outs = copy_node(b, n, ins, regions)
            else:
                outs = res if isinstance(res, (tuple, list)) else (res,)
                _check_types(n, outs, what)
                replaced += 1
        for o, new in zip(n.outputs, outs):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in graph.outputs]
    return b.graph, replaced


def _with_regions(node, regions):
    """`node` seen with its rewritten regions (the rule decides on what the regions became)."""
    view = Node(node.kind, node.inputs, node.attrs, node.src, regions)
    view.outputs = node.outputs
    return view


def _check_types(node, outs, what):
    if len(outs) != len(node.outputs) or any(
            (o.shape, o.dtype) != (new.shape, new.dtype) for o, new in zip(node.outputs, outs)):
        got = ", ".join(v.type_str() for v in outs)
        want = ", ".join(v.type_str() for v in node.outputs)
        raise IRTypeError(f"{what} of {node.kind.name} produced ({got}) for ({want}) in "
                          f"`{node.text()}`")


def _effectful(node):
    return node.kind is OpKind.HostPrimitive and getattr(node.attrs.get("params"), "effectful",
                                                         False)


def dce(graph):
    """Drops the nodes none of whose outputs reach a graph output (Inputs and effectful host
    primitives stay), in place and in every region; returns `graph`."""
    live = {v.id for v in graph.outputs}
    kept = []
    for n in reversed(graph.nodes):
        if n.kind is OpKind.Input or any(o.id in live for o in n.outputs) or _effectful(n):
            for r in n.regions:
                dce(r)
            kept.append(n)
            live.update(v.id for v in n.inputs)
    graph.nodes = kept[::-1]
    return graph
