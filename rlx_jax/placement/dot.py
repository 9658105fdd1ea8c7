"""A Placement as a Graphviz DOT graph (`Placement.to_dot()`; no dependency: render it with
`dot -Tsvg`, or the `graphviz` package where installed): each segment a cluster, device ones
blue and host ones red with each host op's reason; the values crossing from one segment into
another as bold edges labelled with their type and bytes; the kinds recognition made
(high-level, backward and optimizer kinds) drawn with a double border; the arguments as
ellipses. Constants are left out."""
from ..ir.ops import BACKWARD, FORWARD, OPTIMIZER, OpKind
from .partition import DEVICE

_FILL = {"device": "#dbeafe", "host": "#fee2e2"}
RECOGNISED = FORWARD | BACKWARD | OPTIMIZER


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(node, why=None):
    lines = [node.kind.name + (f"[{node.attrs['fn']}]" if "fn" in node.attrs else "")]
    if node.src:
        lines.append(node.src.split(" (")[0])
    if why:
        lines.append(why if len(why) <= 60 else why[:59] + "…")
    return "\n".join(lines)


def to_dot(placement, fmt_bytes):
    """The DOT text of `placement` (fmt_bytes: bytes -> text)."""
    graph = placement.graph
    ids, lines = {}, [f"digraph {_quote(graph.name)} {{",
                      '  rankdir=TB; node [shape=box, fontname="Helvetica", fontsize=10];',
                      '  edge [fontname="Helvetica", fontsize=9];']
    segment_of = {}
    for i, v in enumerate(graph.inputs):
        ids[v.id] = f"arg{i}"
        name = (graph.input_names or [None] * len(graph.inputs))[i] or f"argument {i}"
        lines.append(f"  arg{i} [shape=ellipse, label={_quote(f'{name}: {v.type_str()}')}];")
    for s in placement.segments:
        kind = "device" if s.placement == DEVICE else "host"
        title = f"segment {s.index}: {kind} ({placement.runs_on(s)}), {len(s.nodes)} op(s)"
        lines += [f"  subgraph cluster_{s.index} {{",
                  f"    label={_quote(title)}; style=filled; color={_quote(_FILL[kind])};"]
        for n in s.nodes:
            if n.kind in (OpKind.Input, OpKind.Constant):
                continue
            node_id = f"n{len(segment_of)}"
            for o in n.outputs:
                ids[o.id] = node_id
            segment_of[node_id] = s.index
            extra = ", peripheries=2" if n.kind in RECOGNISED else ""
            label = _label(n, placement.host.get(id(n)))
            lines.append(f"    {node_id} [label={_quote(label)}{extra}];")
        lines.append("  }")
    edges = set()
    for s in placement.segments:
        for n in s.nodes:
            for o in n.outputs:
                dst = ids.get(o.id)
                for v in n.inputs if dst else ():
                    src = ids.get(v.id)
                    if src is None or (src, dst) in edges:
                        continue
                    edges.add((src, dst))
                    crossing = src in segment_of and segment_of[src] != segment_of[dst]
                    text = f"{v.type_str()} {fmt_bytes(v.nbytes)}"
                    attrs = f" [style=bold, label={_quote(text)}]" if crossing else ""
                    lines.append(f"  {src} -> {dst}{attrs};")
    for i, v in enumerate(graph.outputs):
        if v.id in ids:
            text = f"result {i}: {v.type_str()}"
            lines.append(f"  out{i} [shape=ellipse, label={_quote(text)}];")
            lines.append(f"  {ids[v.id]} -> out{i};")
    lines.append("}")
    return "\n".join(lines) + "\n"
