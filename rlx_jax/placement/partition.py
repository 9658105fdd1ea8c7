"""Partitioning: a legalized graph cut into device and host segments.

`host` names the top-level nodes the backend cannot run ({id(node): reason}); everything else
is device work. A control-flow node is placed whole: its regions go where it goes.

Algorithm. Segments alternate device, host, device, ... Each node gets the earliest segment of
its placement that comes no earlier than the segments of its operands' producers (as-soon-as-
possible layering). The number of segments is then 1 + the largest number of placement
changes along any dependency path, which no valid partition can beat: every such change on a
path forces a new segment after the one before it. A second pass, over the nodes in reverse
order, moves a device node into a later device segment (no later than its first consumer)
when that lowers the bytes crossing segment boundaries: e.g. a cheap op on a graph input whose
result is read only after the host segment is computed where it is read, so only the input
crosses. Constants belong to no segment: each segment that reads one holds a copy, so no
constant ever crosses a boundary. Graph inputs are read by any segment.

Given / Result (x -> a = x @ w -> b = a & 7 (host) -> c = b * 2):
    segment 0 device: a;  segment 1 host: b;  segment 2 device: c
    crossing: a (0 -> 1), b (1 -> 2)
"""
from ..ir.graph import Builder, Graph, Node
from ..ir.ops import OpKind
from ..ir.rewrite import copy_node

DEVICE, HOST = "device", "host"
FREE = (OpKind.Input, OpKind.Constant)


class Segment:
    """One segment: `graph` (its own Inputs stand for `reads`, outer values) computes `writes`
    (the values later segments or the graph's outputs read). `nodes` are the original nodes;
    `constants` pairs each Constant copied into `graph` with the original."""
    index: int
    placement: str
    nodes: list[Node]

    def __init__(self, index, placement, nodes):
        self.index, self.placement, self.nodes = index, placement, nodes
        self.graph, self.reads, self.writes, self.constants = None, [], [], []


def value_reasons(graph, problems):
    """{id(top-level node): reason} from `problems` ((node, value, why) for values a backend
    cannot hold, region values included): the top-level node computing such a value, in
    itself or in its regions, goes to the host, and so does every node reading one (a graph
    input of such a type is read only by host nodes)."""
    owner = {id(m): n for n in graph.nodes for m in n.walk()}
    bad, bad_values = {}, {}
    for m, v, why in problems:
        bad_values[v.id] = why
        n = owner[id(m)]
        if n.kind is not OpKind.Input:
            inner = "" if m is n else f" inside {n.kind.name}" + (f" at {m.src}" if m.src else "")
            bad.setdefault(id(n), f"{v.type_str()} produced by {m.kind.name}{inner}: {why}")
    for n in graph.nodes:
        if n.kind in FREE or id(n) in bad:
            continue
        for v in n.inputs:
            if v.id in bad_values:
                bad[id(n)] = f"it reads {v.type_str()}: {bad_values[v.id]}"
                break
    return bad


def _layers(graph, host):
    """{id(node): segment number}: device nodes on even numbers, host nodes on odd ones."""
    seg = {}
    for n in graph.nodes:
        if n.kind in FREE:
            continue
        lo = max((seg[id(v.node)] for v in n.inputs if id(v.node) in seg), default=0)
        want = 1 if id(n) in host else 0
        seg[id(n)] = lo if lo % 2 == want else lo + 1
    return seg


def _sink(graph, host, seg):
    """Moves device nodes later where that lowers the bytes crossing boundaries."""
    users = graph.readers()
    outputs = {v.id for v in graph.outputs}

    def readers(v):
        return {seg[id(u)] for u in users.get(v.id, ())}

    def cost(v, readers_of_v):
        """Bytes `v` carries across boundaries when its producer sits where it sits."""
        if v.node.kind in FREE:
            return 0 if v.node.kind is OpKind.Constant else v.nbytes * bool(readers_of_v)
        return v.nbytes * len(readers_of_v - {seg[id(v.node)]})

    for n in reversed(graph.nodes):
        if n.kind in FREE or id(n) in host or any(o.id in outputs for o in n.outputs):
            continue
        uses = [seg[id(u)] for o in n.outputs for u in users.get(o.id, ())]
        if not uses:
            continue
        target = min(uses) - min(uses) % 2       # the latest device segment before every use
        here = seg[id(n)]
        if target <= here:
            continue
        operands = [v for v in n.inputs if v.node.kind is not OpKind.Constant]
        before = sum(cost(o, readers(o)) for o in n.outputs + tuple(operands))
        seg[id(n)] = target
        after = sum(cost(o, readers(o)) for o in n.outputs + tuple(operands))
        if after >= before:
            seg[id(n)] = here


def partition(graph, host):
    """[Segment] in execution order (see the module docstring); one device segment when
    `host` is empty."""
    seg = _layers(graph, host)
    _sink(graph, host, seg)
    order = sorted(set(seg.values()))
    segments = {k: Segment(i, HOST if k % 2 else DEVICE, [])
                for i, k in enumerate(order)}
    for n in graph.nodes:
        if id(n) in seg:
            segments[seg[id(n)]].nodes.append(n)
    out = [segments[k] for k in order]
    _extract(graph, out, seg)
    return out


def _extract(graph, segments, seg):
    """Fills each segment's graph, reads and writes."""
    read_later = {v.id for v in graph.outputs}
    for n in graph.nodes:
        for v in n.inputs:
            if id(n) in seg and id(v.node) in seg and seg[id(v.node)] != seg[id(n)]:
                read_later.add(v.id)
    for s in segments:
        b = Builder(Graph(f"{graph.name}.{s.placement}{s.index}"))
        env = {}
        for n in s.nodes:
            for v in n.inputs:
                if v.id in env:
                    continue
                if v.node.kind is OpKind.Constant:
                    env[v.id] = copy_node(b, v.node, [])[0]
                    s.constants.append((env[v.id].node, v.node))
                else:
                    env[v.id] = b.input(v.shape, v.dtype)
                    s.reads.append(v)
            outs = copy_node(b, n, [env[v.id] for v in n.inputs])
            for o, new in zip(n.outputs, outs):
                env[o.id] = new
        s.writes = [o for n in s.nodes for o in n.outputs if o.id in read_later]
        b.graph.outputs = [env[v.id] for v in s.writes]
        s.graph = b.graph
    return segments
