"""The stages of an rlx_jax.jit function, as `jax.stages` names them: `Jitted.trace(*args)` gives
a `Traced` (the jaxpr and the traced IR graph), `.lower()` a `Lowered` (legalized and placed for
one backend and one input signature), `.compile()` a `Compiled` (callable). Their program texts
are rlx_jax's IR or the backend's program, never StableHLO (`lowered_text`); their cost and
memory estimates are in analysis.py.
"""
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax

from . import analysis, debug_checks
from . import options as _options
from .arguments import with_weak_types
from .debug_checks import DEBUG_INFS, DEBUG_NANS
from .backends.base import Executable, runtime_of
from .errors import BadArgumentError
from .ir import Graph
from .numpy_rules import with_own_numpy_rules
from .placement import Placement, warn_once
from .placement.executable import PartitionedExecutable


class Traced:
    """A traced call: `.jaxpr` (the ClosedJaxpr), `.graph` (the traced IR, before legalization),
    `.lower()` (the `Lowered` for the function's backend)."""

    def __init__(self, jaxpr: jax.extend.core.ClosedJaxpr, graph: Graph,
                 lower: Callable[[], "Lowered"]) -> None:
        self.jaxpr, self.graph, self._lower = jaxpr, graph, lower

    def lower(self, **jax_keywords: Any) -> "Lowered":
        """The Lowered; JAX's lowering keywords (jax.export passes `lowering_platforms=`, ...)
        ask for StableHLO, which rlx_jax does not make: refused, saying what does."""
        if jax_keywords:
            raise BadArgumentError(
                f"Traced.lower({', '.join(sorted(jax_keywords))}=...): these are JAX's lowering "
                f"keywords (jax.export serializes StableHLO; rlx_jax compiles without XLA and "
                f"makes none): export with jax.export.export(jax.jit(f)), or save a Core ML "
                f"package with rlx_jax.export_coreml(f, *args) (symbolic shapes included)")
        return self._lower()

    def as_text(self) -> str:
        return self.graph.as_text()


# lists that each Compiled made is appended to (testing.recorded_programs)
RECORDERS: list[list[Any]] = []


class Lowered:
    """A traced and legalized program for one backend and one input signature."""

    def __init__(self, graph: Graph, placement: Placement, options: dict[str, Any],
                 in_tree: jax.tree_util.PyTreeDef, out_tree: jax.tree_util.PyTreeDef,
                 timings: dict[str, float], name: str, keys: Any = None,
                 out_weak: Sequence[bool] = ()) -> None:
        self.graph, self._placement, self.keys = graph, placement, keys
        self.out_weak = out_weak     # the jaxpr's output weak types (arguments.weak_types)
        self.legalized, self.backend = placement.graph, placement.backend
        self.options, self.in_tree, self.out_tree = options, in_tree, out_tree
        self.timings, self.name = timings, name
        self.out_specs: Sequence[Any] = ()   # arguments.out_specs (set by Jitted._lower)
        self._backend_program: Any = None
        self.fallback = "host"           # jit's fallback (set by Jitted._lower)

    def placement(self) -> Placement:
        """Where each op runs (placement.Placement): the segments in order, device or host,
        their ops (host ones with why), and the values crossing each boundary."""
        return self._placement

    def as_text(self, level: str = "ir", **jax_keywords: Any) -> str:
        """level: "ir" (legalized), "traced", "placement" (the IR with each node's segment),
        or "backend" (the backend's program); JAX's "stablehlo"/"hlo" are refused (lowered_text)."""
        return lowered_text(self, level, jax_keywords)

    def op_counts(self, level: str = "ir") -> dict[str, int]:
        """OpKind name -> count of the legalized graph; level="backend": the backend's ops."""
        if level == "ir":
            return self.legalized.op_counts()
        return cast(dict[str, int], self._program().op_counts())

    @with_own_numpy_rules
    def _program(self) -> Any:
        if not self._placement.device_only:
            raise BadArgumentError(
                f"'{self.name}' runs in {len(self._placement.segments)} segments (some on the "
                f"host); its backend program is per segment: see Lowered.placement()")
        if self._backend_program is None:
            opts = {k: v for k, v in self.options.items() if k != "output"}
            self._backend_program = self.backend.build_program(self.legalized, name=self.name,
                                                               **opts)
        return self._backend_program

    @with_own_numpy_rules
    def compile(self) -> "Compiled":
        t0 = time.perf_counter()
        opts = {k: v for k, v in self.options.items() if k != "output"}
        if self._placement.device_only:
            exe = self.backend.lower(self.legalized, name=self.name, **opts)
        else:
            warn_once(self._placement)
            exe = PartitionedExecutable(self._placement, self.name, opts,
                                        self.options.get("output", _options.DEFAULT_OUTPUT))
        self.timings["lower"] = time.perf_counter() - t0
        exe = self.backend.wrap_executable(exe, self)
        compiled = Compiled(exe, self, self.options.get("output", _options.DEFAULT_OUTPUT))
        for recorder in RECORDERS:           # testing.recorded_programs()
            recorder.append(compiled)
        return compiled


class Compiled:
    """A lowered, ready executable; call it with the same argument structure as the function."""

    def __init__(self, executable: Callable[..., Any], lowered: Lowered,
                 output: str = _options.DEFAULT_OUTPUT) -> None:
        self.executable = executable
        self.lowered = lowered
        self.output = output
        weak = lowered.out_weak if output == "jax" else ()
        convert = None if isinstance(executable, Executable) and executable.converts_output else \
            lowered.backend.output_converter(output, weak)
        self._convert = with_weak_types(convert, weak)
        self._keys = lowered.keys          # arguments.KeyBoundary, or None
        tree = lowered.out_tree            # a single array result is returned as it is
        self._single = tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(tree)
        if output == "jax" and lowered.out_specs:        # results of an explicit mesh
            self._convert = _on_mesh(self._convert, lowered.out_specs)

    @property
    def runtime(self) -> str:
        """What runs the program, read now ("mlx-eager" after an mx.compile failure on the
        first call): "mlx-compiled", "mil-reference", "coreml", "xla"; "+host" with host parts."""
        return runtime_of(self.executable, self.lowered.backend)

    def call_flat(self, leaves: Sequence[Any]) -> Any:
        keys = self._keys
        if keys is None and self._convert is None and self._single:    # native, one array
            outs = self.executable(*leaves)
            if DEBUG_NANS.value or DEBUG_INFS.value:
                debug_checks.check(outs, self.lowered.name)
            return outs[0]
        if keys is not None:
            leaves = keys.args(leaves)
        outs = self.executable(*leaves)
        if self._convert is not None:
            outs = self._convert(outs)
        if keys is not None:
            outs = keys.results(outs)
        if DEBUG_NANS.value or DEBUG_INFS.value:      # jax_debug_nans / jax_debug_infs
            debug_checks.check(outs, self.lowered.name)
        if self._single:
            return outs[0]
        return jax.tree_util.tree_unflatten(self.lowered.out_tree, outs)

    def as_text(self) -> str:
        """The backend's program (device-only programs of MLX and Core ML), else the IR with
        each node's segment."""
        return compiled_text(self.lowered)

    def cost_analysis(self) -> dict[str, float]:
        """{"flops", "bytes accessed"} estimated from the legalized IR (analysis.py: the rules)."""
        return analysis.cost_analysis(self.lowered.legalized)

    def memory_analysis(self) -> analysis.MemoryAnalysis:
        """analysis.MemoryAnalysis: argument, output, temporary and constant bytes of the IR."""
        return analysis.memory_analysis(self.lowered.legalized)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        if tree != self.lowered.in_tree:
            raise BadArgumentError(
                f"compiled for inputs {self.lowered.in_tree}, called with {tree}")
        return self.call_flat(leaves)


def _on_mesh(convert: Callable[[list[Any]], list[Any]] | None,
             specs: Sequence[Any]) -> Callable[[list[Any]], list[Any]]:
    """`convert` followed by placing each result as a NamedSharding of the current mesh
    (jax.set_mesh) with its spec, as jax.jit's results are under a mesh."""
    def placed(outs: list[Any]) -> list[Any]:
        outs = convert(outs) if convert is not None else outs
        mesh = jax.sharding.get_mesh()
        if getattr(mesh, "empty", True):
            return outs
        return [o if s is None or not isinstance(o, jax.Array)
                else jax.device_put(o, jax.sharding.NamedSharding(mesh, s))
                for o, s in zip(outs, specs)]
    return placed


def compiled_text(lowered: Lowered) -> str:
    """The backend's program where there is one and it runs whole on the device, else the
    legalized IR with each node's segment."""
    try:
        return lowered.as_text("backend")
    except BadArgumentError:
        return lowered.as_text("placement")


TEXT_LEVELS = ("ir", "traced", "placement", "backend")


def lowered_text(lowered: Lowered, level: str, jax_keywords: dict[str, Any]) -> str:
    """Lowered.as_text: rlx_jax's program at `level`. JAX's own levels (StableHLO, HLO, its
    `dialect=` / `debug_info=` keywords) are JAX's compiler IR, which rlx_jax does not make:
    asking for them is refused, saying where JAX's text comes from."""
    if level not in TEXT_LEVELS or jax_keywords:
        asked = ", ".join([repr(level)] + [f"{k}={v!r}" for k, v in jax_keywords.items()])
        raise BadArgumentError(
            f"as_text({asked}): rlx_jax's program text has the levels {list(TEXT_LEVELS)} "
            f"(its IR, not StableHLO or HLO: rlx_jax compiles without XLA); JAX's own lowering "
            f"of the function is jax.jit(f).lower(*args).as_text()")
    if level == "ir":
        return lowered.legalized.as_text()
    if level == "traced":
        return lowered.graph.as_text()
    if level == "placement":
        return lowered.placement().annotated_text()
    return cast(str, lowered._program().as_text())
