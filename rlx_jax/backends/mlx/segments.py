"""A graph that holds host-level control flow (rules_control.is_host: a While, a host-loop Scan,
an If over such branches) cannot be one `mx.compile`d function: the loop reads values with
`.item()` between steps, which compile forbids. `segmented` cuts the graph's top level with the
partitioner (placement/partition.py, the host nodes being the loop drivers): every device segment
is one compiled function, every host node runs in Python between them (its own regions again
compiled, recursively). So the code before, between and after the loops keeps its fusion, and
only the loop driver is eager.
"""
from ...ir.ops import OpKind
from ...placement.partition import HOST, partition
from .rules_control import is_host


def segmented(graph, ctx, compile_fn):
    """The graph as a function of mx arrays: host segments run eagerly, the others through
    `compile_fn(function)` (mx.compile). `ctx.alias` learns each copied Constant."""
    steps, kinds = [], []
    host = {id(n): "host loop" for n in graph.nodes if is_host(n)}
    for s in partition(graph, host):
        for copy, original in s.constants:
            ctx.alias(copy, original)
        fn = (lambda g: lambda *args: ctx.run(g, args))(s.graph)
        on_host = s.placement == HOST
        steps.append((fn if on_host else compile_fn(fn), s.reads, s.writes))
        kinds.append("host" if on_host else "compiled")
    inputs = [(n.out.id, n.attrs["index"]) for n in graph.nodes if n.kind is OpKind.Input]
    returned = {v.id for v in graph.outputs}
    consts = [n for n in graph.nodes if n.kind is OpKind.Constant and n.out.id in returned]

    def run(*args):
        env = {vid: args[i] for vid, i in inputs}
        for n in consts:
            env[n.out.id] = ctx.constant(n)
        for fn, reads, writes in steps:
            for v, val in zip(writes, fn(*[env[r.id] for r in reads])):
                env[v.id] = val
        return [env[v.id] for v in graph.outputs]
    run.segments = kinds
    return run
