"""Running a saved .mlpackage: Core ML itself on macOS, the MIL reference executor elsewhere."""
import sys

from absl import logging

from ...base import Executable
from ..mil.legality import Boundary
from .cache import MIL_LOCK

_REFERENCE_LOGGED: list[bool] = []


def coreml_runtime_available():
    if sys.platform != "darwin":
        return False
    try:
        import coremltools.libcoremlpython  # noqa: F401
    except ImportError:
        return False
    return True


def _log_reference_once():
    if not _REFERENCE_LOGGED:
        _REFERENCE_LOGGED.append(True)
        logging.warning(
            "Core ML cannot run on %s; rlx_jax executes the saved .mlpackage with the MIL "
            "reference executor (checks lowering semantics and float16 rounding, not Core ML "
            "speed).", sys.platform)


def computes_in_float16(spec):
    """Whether a saved ML program computes in float16: some op of it other than a const or a cast
    has a float16 result (read off the program, whatever option built it: nearly every op after
    coremltools' float16 compute precision, or float16 JAX code at either precision)."""
    from coremltools.proto import MIL_pb2
    half = MIL_pb2.DataType.Value("FLOAT16")

    def any_half(blocks):
        return any((op.type not in ("const", "cast")
                    and any(o.type.tensorType.dataType == half for o in op.outputs))
                   or any_half(op.blocks) for b in blocks for op in b.operations)
    return any_half(f.block_specializations[f.opset] for f in spec.mlProgram.functions.values())


def _serialized(execute):
    """The MIL reference executor re-issues ops inside coremltools' global block stack, so one
    thread at a time runs it (Core ML's own predict needs no lock). Each re-issued op also
    leaves a fresh name in the Builder's global name counter, which would grow by a few KB per
    call: the names of these throwaway ops are dropped after each call (ct.convert resets the
    counter the same way before every conversion)."""
    from coremltools.converters.mil import Builder

    def run(feeds):
        with MIL_LOCK:
            try:
                return execute(feeds)
            finally:
                Builder.name_count.clear()
    return run


def _argument(i, name):
    """How an error names argument leaf i of a program (with its pytree path where known)."""
    return f"{i} ('{name}')" if name else f"{i}"


def _own(y, fed):
    """`y`, copied when it is (a view of) an array that was fed in: results become jax.Arrays
    that may alias their numpy memory (jax_arrays.from_numpy), which must not be the caller's."""
    base = y if y.base is None else y.base
    return y.copy() if id(y) in fed or id(base) in fed else y


class CoremlExecutable(Executable):
    """Callable on one array per graph input; returns the outputs as numpy arrays.

    `.runtime` is "coreml" when Core ML runs the package, "mil-reference" otherwise, with
    "-float16" where the program computes in float16 (computes_in_float16); `.package_path` is
    the saved .mlpackage."""

    def __init__(self, graph, package_path, input_names, output_names, compute_units):
        self.graph, self.package_path = graph, package_path
        self.input_names, self.output_names = input_names, output_names
        self.boundary = Boundary()
        import coremltools as ct
        if coreml_runtime_available():
            model = ct.models.MLModel(package_path, compute_units=compute_units)
            self._predict = model.predict
            self.runtime = "coreml"
        else:
            from ..executor.reference import MilReferenceExecutor
            with MIL_LOCK:
                _log_reference_once()
                self._predict = _serialized(MilReferenceExecutor(package_path))
            self.runtime = "mil-reference"
        if computes_in_float16(ct.utils.load_spec(package_path)):
            self.runtime += "-float16"

    def __call__(self, *args):
        if len(args) != len(self.graph.inputs):
            raise TypeError(f"expected {len(self.graph.inputs)} arrays, got {len(args)}")
        names = self.graph.input_names or [None] * len(args)
        feeds = {n: self.boundary.to_model(v, a, _argument(i, names[i]))
                 for i, (n, v, a) in enumerate(zip(self.input_names, self.graph.inputs, args))}
        outs = self._predict(feeds)
        fed = {id(a) for a in feeds.values()} | {id(a.base) for a in feeds.values()}
        return [_own(self.boundary.from_model(v, outs[n]), fed)
                for n, v in zip(self.output_names, self.graph.outputs)]
