"""A graph that holds host-level control flow (rules_control.is_host: a While, a host-loop Scan,
an If over such branches) cannot be one `mx.compile`d function: the loop reads values with
`.item()` between steps, which compile forbids. `split` cuts the graph's top level into runs:
every maximal run of ordinary nodes is one compiled segment, every host node runs in Python
between them (its own regions again compiled, recursively). So the code before, between and
after the loops keeps its fusion, and only the loop driver is eager.

Each run is a graph of its own (its Inputs: the values it reads from earlier runs or from the
graph's inputs; its outputs: the values later runs or the graph's outputs read), run by the one
interpreter.
"""
from ...ir.graph import Builder, Graph
from ...ir.ops import OpKind
from ...ir.rewrite import copy_node
from .rules_control import is_host


class Segment:
    """One run of a graph's top level: `graph` over `reads` (outer values) gives `writes`."""

    def __init__(self, graph, reads, writes, host):
        self.graph, self.reads, self.writes, self.host = graph, reads, writes, host


def _runs(graph):
    runs = []
    for n in graph.nodes:
        if n.kind is OpKind.Input:
            continue
        host = is_host(n)
        if runs and not host and not runs[-1][1]:
            runs[-1][0].append(n)
        else:
            runs.append(([n], host))
    return runs


def split(graph, ctx):
    """[Segment] in order; `ctx.alias` learns each copied Constant (prepared once per graph)."""
    runs = _runs(graph)
    needed_after = [set() for _ in runs]
    live = {v.id for v in graph.outputs}
    for k in range(len(runs) - 1, -1, -1):
        needed_after[k] = set(live)
        for n in runs[k][0]:
            live.update(v.id for v in n.inputs)
    segments = []
    for (nodes, host), after in zip(runs, needed_after):
        b = Builder(Graph(f"{graph.name}.segment{len(segments)}"))
        env, reads = {}, []
        for n in nodes:
            for v in n.inputs:
                if v.id not in env:
                    env[v.id] = b.input(v.shape, v.dtype)
                    reads.append(v)
            outs = copy_node(b, n, [env[v.id] for v in n.inputs])
            if n.kind is OpKind.Constant:
                ctx.alias(outs[0].node, n)
            for o, new in zip(n.outputs, outs):
                env[o.id] = new
        writes = [o for n in nodes for o in n.outputs if o.id in after]
        if not writes:
            continue
        b.graph.outputs = [env[v.id] for v in writes]
        segments.append(Segment(b.graph, reads, writes, host))
    return segments


def segmented(graph, ctx, compile_fn):
    """The graph as a function of mx arrays: host segments run eagerly, the others through
    `compile_fn(function)` (mx.compile)."""
    steps, kinds = [], []
    for s in split(graph, ctx):
        fn = (lambda g: lambda *args: ctx.run(g, args))(s.graph)
        steps.append((fn if s.host else compile_fn(fn), s.reads, s.writes))
        kinds.append("host" if s.host else "compiled")
    inputs = [(n.out.id, n.attrs["index"]) for n in graph.nodes if n.kind is OpKind.Input]

    def run(*args):
        env = {vid: args[i] for vid, i in inputs}
        for fn, reads, writes in steps:
            for v, val in zip(writes, fn(*[env[r.id] for r in reads])):
                env[v.id] = val
        return [env[v.id] for v in graph.outputs]
    run.segments = kinds
    return run
