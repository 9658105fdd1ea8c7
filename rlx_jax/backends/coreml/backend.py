"""The Core ML backend object: claims, options, build / convert / cache / run."""
import time

from ... import jax_arrays
from ...errors import RefusalError
from ..base import Backend
from . import package
from .package import cache as package_cache
from .passes.complex_pairs import REWRITTEN
from .mil.program import MIL_RULES, build_program as _build, io_names
from .passes.empty import FoldedExecutable, NoProgram, fold_empty
from ...ir.dims import symbolic_shape
from .package.flexible import input_types


def _opset(options):
    return options.target


def build(graph, options, timings=None, state=None):
    """Legalized graph -> MilProgram (timed as "mil_build"); `state`: export's Core ML state
    pairs (mil/state.py)."""
    t0 = time.perf_counter()
    with package_cache.MIL_LOCK:       # coremltools' MIL builder state is global
        prog = _build(graph, _opset(options), options.input_names, options.output_names,
                      state)
    if timings is not None:
        timings["mil_build"] = time.perf_counter() - t0
    return prog


def write_package(graph, options, path, timings=None, overwrite=True, sizes=(None, None),
                  finish=None, state=None):
    """Builds, converts and saves `graph` as an .mlpackage at `path`. Zero-size values inside
    the graph are folded away (passes/empty.py); zero-size inputs or results have no place in a
    model's signature, so such a graph is refused. Symbolic input dimensions become flexible
    inputs (package/flexible.py) bounded by their constraints; `sizes`: (default sizes,
    enumerated sizes) of export_coreml; `finish(model)`: export's last touches (an app's
    metadata) before the package is saved; `state`: {input name: output name} kept as Core ML
    state (mil/state.py)."""
    folded = fold_empty(graph, constants_on_host=False)
    if folded.graph is None or not folded.keeps_signature():
        raise RefusalError(
            f"Core ML model inputs and outputs cannot be empty (zero-size): "
            f"{folded.dropped()} of `{graph.name}`\n  What to do: export a function without "
            f"empty arguments or results (their values are known without a model), or run it "
            f"with rlx_jax.jit(..., backend='coreml'), which keeps them off the model")
    graph = folded.graph
    prog = build(graph, options, timings, state)
    if any(symbolic_shape(v.shape) for v in graph.inputs):
        prog.program.functions["main"].set_input_types(tuple(
            input_types(prog.input_names, graph, *sizes)))
    model = package.convert(prog, options, timings)
    package.describe(model, graph, options)
    if finish is not None:
        finish(model)
    t0 = time.perf_counter()
    package.save(model, path, overwrite)
    if timings is not None:
        timings["save"] = time.perf_counter() - t0
    return path


def _to_jax(weak):
    return jax_arrays.Converter(weak)


class CoremlBackend(Backend):
    name = "coreml"
    # complex64 values as float32 (re, im) pairs, FFTs as DFT matmuls (passes/complex_pairs.py): left
    # on the host only at the program's complex boundary and for Ffts above the length limit
    REWRITTEN_OPS = REWRITTEN
    options = package.OPTIONS
    symbolic_programs = True        # flexible inputs (package/flexible.py)

    def rules(self):
        """The lowering table (OpKind -> rule, with each rule's claim), every family
        loaded."""
        return MIL_RULES

    def available(self):
        try:
            package.import_coremltools()
        except ImportError:
            return False
        return True

    def unavailable_reason(self):
        return "" if self.available() else "coremltools is not installed (pip install coremltools)"

    def prepare(self, graph, **options):
        """The legalized graph as it will be lowered: bfloat16 values computed in float32 or
        float16 where the `bfloat16` option asks for it (passes/bfloat16.py), complex64 values
        done as float32 (re, im) pairs where every op on them has a real form
        (passes/complex_pairs.py: FFTs as DFT matmuls), then values above rank 5 that shape ops
        pass through rewritten to rank <= 5 (passes/rank.py), before placement looks at it."""
        from .passes.bfloat16 import widen_bfloat16
        from .passes.complex_pairs import split_complex
        from .passes.rank import lower_rank
        wider = package.Options(**options).bfloat16
        if wider != "host":
            graph = widen_bfloat16(graph, wider)
        return lower_rank(split_complex(graph))

    def host_reasons(self, graph, known, **options):
        """{id(node): reason} of the top-level nodes Core ML cannot run (placement/plan.py). A graph
        whose package is already cached was built whole: nothing to look for."""
        from .passes.complex_pairs import boundary_reasons
        from .passes.host_reasons import host_reasons
        opts = package.Options(**options)
        if not known and package_cache.problem(self.package_path(graph, opts)) is None:
            return {}
        reasons = host_reasons(graph, known, opts.target)
        reasons.update((k, why) for k, why in boundary_reasons(graph).items() if k in known)
        return reasons

    def value_bounds(self, graph):
        """{value id: (lo, hi)} the interval analysis proves for integer values (passes/intervals.py);
        the partitioner gives them to the Inputs of device segments."""
        from .passes.intervals import intervals
        return intervals(graph)

    def check_options(self, options):
        package.import_coremltools()
        package.Options(**options)

    def output_converter(self, output, weak=()):
        """outs -> outs for jit's `output` option (None: the numpy arrays as they are)."""
        return _to_jax(weak) if output == "jax" else None

    def build_program(self, graph, name=None, **options):
        folded = fold_empty(graph)
        if folded.graph is None:
            return NoProgram(folded)
        return build(folded.graph, package.Options(**folded.options(options)))

    def wrap_executable(self, executable, lowered):
        """With fallback="host", a call whose integer arguments Core ML cannot hold runs on
        the host (package/range_fallback.py)."""
        from .package.range_fallback import host_for_range
        return host_for_range(executable, lowered)

    def package_path(self, graph, options):
        return package.entry_path(graph.name, package.graph_hash(graph, options))

    def lower(self, graph, name=None, timings=None, **options):
        """Zero-size inputs and results stay off the model (passes/empty.py); a graph whose results
        are all known statically builds no model."""
        folded = fold_empty(graph)
        model = None
        if folded.graph is not None:
            model = self._lower_model(folded.graph, name, timings, **folded.options(options))
        return model if folded.trivial else FoldedExecutable(folded, model)

    def _lower_model(self, graph, name=None, timings=None, **options):
        from .package.runtime import CoremlExecutable
        opts = package.Options(**options)
        path = self.package_path(graph, opts)
        ins, outs = io_names(graph, opts.input_names, opts.output_names)
        return package_cache.cached(
            path, lambda: write_package(graph, opts, path, timings, overwrite=False),
            lambda: CoremlExecutable(graph, path, ins, outs, opts.ct_units()))
