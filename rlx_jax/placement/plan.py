"""Where each op of a program runs: the placement plan and its report.

`plan` asks the backend which top-level nodes it cannot run (kinds it neither claims nor
decomposes, legalize.unclaimed; and what its own check refuses, `Backend.host_reasons`),
partitions the graph (partition.py) and returns a `Placement`: the segments in order,
device ones for the backend and host ones for the `xla` reference (JAX on the CPU), each
with its ops (kind, source line, and for host ops why they are there) and the values crossing
into it (shape, dtype, bytes). `fallback="error"` refuses instead, naming every node.
"""
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, NoReturn

from absl import logging

from ..errors import LegalizationError
from ..ir.graph import Graph, Node, Value
from ..ir.interpret import where
from ..numpy_rules import with_own_numpy_rules
from ..ir.ops import OpKind
from ..passes.legalize import legalize, unclaimed
from .fold import fold_constants
from .partition import DEVICE, FREE, HOST, Segment, partition

if TYPE_CHECKING:
    from ..backends.base import Backend

_WARNED: set[tuple[object, ...]] = set()


class Placement:
    """The segments of a program (`segments`: partition.Segment, in order), the
    backend running the device ones, and `host` ({id(node): reason})."""

    def __init__(self, graph: Graph, backend: "Backend", segments: list[Segment],
                 host: dict[int, str]) -> None:
        self.graph, self.backend, self.segments, self.host = graph, backend, segments, host
        # the ops evaluated once at compile time by JAX on the CPU (placement/fold.py)
        self.folded: list[Node] = []

    @property
    def device_only(self) -> bool:
        """Every segment on the device, and no result a constant the device cannot hold (a
        float0 cotangent: such a constant, in no segment, is handed back by the host)."""
        return all(s.placement == DEVICE for s in self.segments) and not any(
            v.node.kind is OpKind.Constant and id(v.node) in self.host for v in self.graph.outputs)

    def host_ops(self) -> list[tuple[Node, str]]:
        """[(node, reason)] of the host-placed ops, in program order."""
        return [(n, self.host[id(n)]) for n in self.graph.nodes if id(n) in self.host]

    def crossing_bytes(self) -> int:
        """Bytes entering segments from other segments per call (graph inputs not counted)."""
        return sum(v.nbytes for s in self.segments for v in s.reads
                   if v.node.kind not in FREE)

    def runs_on(self, segment: Segment) -> str:
        return self.backend.name if segment.placement == DEVICE else "xla"

    def __str__(self) -> str:
        lines = [f"placement of '{self.graph.name}' on backend '{self.backend.name}': "
                 f"{len(self.segments)} segment(s), "
                 f"{sum(len(s.nodes) for s in self.segments if s.placement == HOST)} host "
                 f"op(s), {_fmt_bytes(self.crossing_bytes())} crossing"]
        if self.folded:
            lines.append(f"folded at compile time (jax on the CPU): {len(self.folded)} op(s) "
                         "reading no argument: " + ", ".join(
                             f"{_op(n)}{where(n)}" for n in self.folded[:8]) +
                         (f", and {len(self.folded) - 8} more" if len(self.folded) > 8 else ""))
        for s in self.segments:
            lines.append(f"segment {s.index}: {s.placement} ({self.runs_on(s)}), "
                         f"{len(s.nodes)} op(s)")
            for v in s.reads:
                origin = ("argument" if v.node.kind is FREE[0] else
                          f"from segment {self._segment_of(v)}")
                lines.append(f"  in:  {v.type_str()} {_fmt_bytes(v.nbytes)} ({origin})")
            for n in s.nodes:
                why = f"  -- {self.host[id(n)]}" if id(n) in self.host else ""
                lines.append(f"  {_op(n)}{where(n)}{why}")
            for v in s.writes:
                lines.append(f"  out: {v.type_str()} {_fmt_bytes(v.nbytes)}")
        return "\n".join(lines)

    def _segment_of(self, v: Value) -> int | str:
        for s in self.segments:
            if v.node in s.nodes:
                return s.index
        return "?"

    def to_dot(self, detail: str = "ops") -> str:
        """The placement as Graphviz DOT text (placement/dot.py). detail="ops": segments as
        coloured clusters of their ops, crossing values as labelled bold edges, recognised
        kinds double-bordered; detail="segments": one box per segment listing its kinds, for
        programs too large to draw op by op."""
        from . import dot
        if detail not in ("ops", "segments"):
            raise ValueError(f"to_dot(detail={detail!r}): 'ops' or 'segments'")
        draw = dot.to_dot if detail == "ops" else dot.segments_dot
        return draw(self, _fmt_bytes)

    def to_svg(self, detail: str = "ops") -> str:
        """`to_dot(detail)` drawn as SVG text by Graphviz, through the `graphviz` package and
        its `dot` program (neither is a dependency: `pip install graphviz` and the Graphviz
        program); a clear error names whichever is missing. `to_dot()` needs neither."""
        from .dot import to_svg
        return to_svg(self.to_dot(detail))

    def annotated_text(self) -> str:
        """The IR with each node's placement (`Lowered.as_text(level="placement")`)."""
        seg = {id(n): s for s in self.segments for n in s.nodes}
        names = self.graph.namer()
        lines = [f"graph {self.graph.name} on {self.backend.name}:"]
        for n in self.graph.nodes:
            s = seg.get(id(n))
            tag = f"{s.placement}{s.index}" if s is not None else "-"
            lines.append(f"  [{tag:>8}] {n.text(names)}{where(n)}")
        lines.append("  return " + ", ".join(names(v) for v in self.graph.outputs))
        return "\n".join(lines)


def _op(n: Node) -> str:
    """The op's kind, with its attributes when they are short (`Binary[fn=and]`)."""
    attrs = n.attr_text()
    return n.kind.name + (attrs if len(attrs) <= 40 else "")


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} MB"


def host_nodes(graph: Graph, backend: "Backend", keep: Collection[Any],
               options: dict[str, Any] | None = None) -> dict[int, str]:
    """{id(node): reason} of the top-level nodes of legalized `graph` that must run on the host."""
    host = unclaimed(graph, keep)
    host.update(backend.host_reasons(graph, host, **(options or {})))
    return host


@with_own_numpy_rules
def place(graph: Graph, backend: "Backend", native_backward: bool = True,
          fallback: str = "host", options: dict[str, Any] | None = None,
          fold: bool = True) -> Placement:
    """Legalizes traced `graph` for `backend` (kept kinds native, the rest decomposed; with
    fallback="host" what neither stays for the host), folds what reads no argument (`fold`,
    fold.py, where `backend.folds_constants`: not on the xla reference, where XLA folds),
    applies the backend's `prepare`
    (Core ML: ranks rewritten to <= 5) and returns its Placement (`plan`); under JAX's default
    numpy rules (numpy_rules.py), as everything rlx_jax builds."""
    from ..backends.base import kept_kinds
    keep = kept_kinds(backend, native_backward)
    # `prepare` may rewrite nodes legalization leaves unclaimed (Core ML's REWRITTEN_OPS:
    # complex values as float32 pairs); with fallback="error", `plan` refuses what is left
    legal = legalize(graph, keep, backend=backend.name,
                     fallback="host" if backend.REWRITTEN_OPS else fallback)
    folded: list[Node] = []
    if fold and backend.folds_constants:
        legal, folded = fold_constants(legal)
    legal = backend.prepare(legal, **(options or {}))
    placed = plan(legal, backend, keep, fallback, options)
    placed.folded = folded
    return placed


def plan(graph: Graph, backend: "Backend", keep: Collection[Any], fallback: str = "host",
         options: dict[str, Any] | None = None) -> Placement:
    """The Placement of legalized `graph` on `backend` (see the module docstring)."""
    host = host_nodes(graph, backend, keep, options)
    if host and fallback == "error":
        raise_host(graph, backend, host)
    segments = partition(graph, host)
    if len(segments) > 1:
        _bound_reads(graph, backend, segments)
    return Placement(graph, backend, segments, host)


def _bound_reads(graph: Graph, backend: "Backend", segments: list[Segment]) -> None:
    """A device segment's integer Inputs carry the bounds the whole graph proves for the values
    they stand for (`Backend.value_bounds`, Core ML's interval analysis), so the segment is
    lowered knowing what the whole program knew."""
    bounds = backend.value_bounds(graph)
    if bounds is None:
        return
    for s in segments:
        if s.placement != DEVICE:
            continue
        for inp, v in zip(s.graph.inputs, s.reads):
            if v.dtype.kind in "iu" and bounds.get(v.id) is not None:
                inp.node.attrs["bounds"] = tuple(int(b) for b in bounds[v.id])


def raise_host(graph: Graph, backend: "Backend", host: dict[int, str], what: str = "run",
               todo: str | None = None) -> NoReturn:
    """One LegalizationError naming every node in `host` with its line and reason."""
    nodes = [n for n in graph.nodes if id(n) in host]
    lines = [f"  {n.kind.name}: `{_short(n.text())}`{where(n)}\n      why: {host[id(n)]}"
             for n in nodes]
    raise LegalizationError(
        f"backend '{backend.name}' cannot {what} {len(nodes)} node(s) of '{graph.name}':\n"
        + "\n".join(lines) + "\n" + (todo or
        "Leave fallback='host' (the default) to run these ops on the host between device "
        "segments, rewrite them, or use another backend (rlx_jax.available_backends())."))


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def warn_once(placement: Placement) -> None:
    """The one absl warning of a program compiled with host segments."""
    ops = placement.host_ops()
    key = (placement.graph.name, placement.backend.name,
           tuple((n.kind.name, n.src) for n, _ in ops))
    if not ops or key in _WARNED:
        return
    _WARNED.add(key)
    shown = "; ".join(f"{n.kind.name}{where(n)} ({why})" for n, why in ops[:8])
    more = f"; and {len(ops) - 8} more" if len(ops) > 8 else ""
    logging.warning(
        "rlx_jax: backend '%s' runs %d op(s) of '%s' on the host (jax on the CPU) in %d host "
        "segment(s): %s%s. See Lowered.placement(); fallback='error' refuses instead.",
        placement.backend.name, len(ops), placement.graph.name,
        sum(s.placement == HOST for s in placement.segments), shown, more)
