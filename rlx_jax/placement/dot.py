"""A Placement as a Graphviz DOT graph (`Placement.to_dot()`; no dependency: render it with
`dot -Tsvg`, or the `graphviz` package where installed): each segment a cluster, device ones
blue and host ones red with each host op's reason; the values crossing from one segment into
another as bold edges labelled with their type and bytes; the kinds recognition made
(high-level, backward and optimizer kinds) drawn with a double border; the arguments as
ellipses. Constants are left out."""
from collections.abc import Callable
from typing import Protocol

from ..ir.graph import Graph, Node
from ..ir.ops import BACKWARD, FORWARD, OPTIMIZER, OpKind
from .partition import DEVICE, Segment


class Placement(Protocol):
    """What drawing reads of a placement.plan.Placement."""
    graph: Graph
    segments: list[Segment]
    host: dict[int, str]

    def runs_on(self, segment: Segment) -> str: ...

_FILL = {"device": "#dbeafe", "host": "#fee2e2"}
RECOGNISED = FORWARD | BACKWARD | OPTIMIZER


def _quote(text: object) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(node: Node, why: str | None = None) -> str:
    lines = [node.kind.name + (f"[{node.attrs['fn']}]" if "fn" in node.attrs else "")]
    if node.src:
        lines.append(node.src.split(" (")[0])
    if why:
        lines.append(why if len(why) <= 60 else why[:59] + "…")
    return "\n".join(lines)


def to_dot(placement: Placement, fmt_bytes: Callable[[int], str]) -> str:
    """The DOT text of `placement` (fmt_bytes: bytes -> text)."""
    graph = placement.graph
    ids, lines = {}, [f"digraph {_quote(graph.name)} {{",
                      '  rankdir=TB; node [shape=box, fontname="Helvetica", fontsize=10];',
                      '  edge [fontname="Helvetica", fontsize=9];']
    segment_of: dict[str, int] = {}
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
    edges: set[tuple[str, str]] = set()
    for s in placement.segments:
        for n in s.nodes:
            for o in n.outputs:
                dst = ids.get(o.id)
                if dst is None:
                    continue
                for v in n.inputs:
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


def segments_dot(placement: Placement, fmt_bytes: Callable[[int], str],
                 most: int = 8) -> str:
    """The DOT text of `placement` one box per segment, for programs too large to draw op by
    op: each box lists the segment's ops by kind (the `most` commonest, recognised kinds first),
    a host segment its reasons; an edge per pair of segments a value crosses between, labelled
    with the values' count and bytes; the arguments and results as two ellipses."""
    graph = placement.graph
    lines = [f"digraph {_quote(graph.name)} {{",
             '  rankdir=LR; node [shape=box, fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];',
             '  label="* a kind recognition made; bold: values crossing between segments";',
             '  fontname="Helvetica"; fontsize=9;']
    owner: dict[int, int] = {}
    for s in placement.segments:
        kind = "device" if s.placement == DEVICE else "host"
        counts: dict[OpKind, int] = {}
        for n in s.nodes:
            if n.kind not in (OpKind.Input, OpKind.Constant):
                owner.update((o.id, s.index) for o in n.outputs)
                counts[n.kind] = counts.get(n.kind, 0) + 1
        order = sorted(counts, key=lambda k: (k not in RECOGNISED, -counts[k], k.name))
        body = [f"{k.name} ×{counts[k]}" + (" *" if k in RECOGNISED else "") for k in order]
        if len(body) > most:
            body = body[:most] + [f"… {len(body) - most} more kind(s)"]
        whys = sorted({placement.host[id(n)] for n in s.nodes if id(n) in placement.host})
        body += [w if len(w) <= 90 else w[:89] + "…" for w in whys]
        title = f"segment {s.index}: {kind} ({placement.runs_on(s)}), {len(s.nodes)} op(s)"
        lines.append(f"  s{s.index} [style=filled, fillcolor={_quote(_FILL[kind])}, "
                     f"label={_quote(chr(10).join([title, *body]))}];")
    crossing: dict[tuple[int | str, int], tuple[int, int]] = {}
    for s in placement.segments:
        for v in s.reads:
            src: int | str | None = owner.get(v.id)
            if src is None and v.node.kind is OpKind.Input:
                src = "args"
            if src is not None and src != s.index:
                count, size = crossing.get((src, s.index), (0, 0))
                crossing[(src, s.index)] = (count + 1, size + v.nbytes)
    outs: dict[int, tuple[int, int]] = {}
    for v in graph.outputs:
        if v.id in owner:
            count, size = outs.get(owner[v.id], (0, 0))
            outs[owner[v.id]] = (count + 1, size + v.nbytes)
    args = f"{len(graph.inputs)} argument(s), {fmt_bytes(sum(v.nbytes for v in graph.inputs))}"
    lines += [f"  args [shape=ellipse, label={_quote(args)}];",
              f"  results [shape=ellipse, label={_quote(f'{len(graph.outputs)} result(s)')}];"]
    for (src, dst), (count, size) in crossing.items():
        style, name = ("", src) if src == "args" else ("style=bold, ", f"s{src}")
        text = f"{count} value(s), {fmt_bytes(size)}"
        lines.append(f"  {name} -> s{dst} [{style}label={_quote(text)}];")
    for out, (count, size) in outs.items():
        lines.append(f"  s{out} -> results [label={_quote(f'{count}, {fmt_bytes(size)}')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(dot_text: str) -> str:
    """SVG text of `dot_text` rendered by the `graphviz` package's `dot` program."""
    try:
        import graphviz
    except ImportError as e:
        raise ImportError("Placement.to_svg() needs the graphviz package: `pip install "
                          "graphviz` (and the Graphviz program, e.g. `apt-get install "
                          "graphviz` or `brew install graphviz`); to_dot() needs neither") from e
    try:
        return str(graphviz.Source(dot_text).pipe(format="svg", encoding="utf-8"))
    except graphviz.ExecutableNotFound as e:
        raise RuntimeError("Placement.to_svg(): the graphviz package is installed but the "
                           "Graphviz program `dot` is not on PATH (`apt-get install graphviz`"
                           " or `brew install graphviz`)") from e
