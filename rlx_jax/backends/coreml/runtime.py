"""Running a saved .mlpackage: Core ML itself on macOS, the MIL reference executor elsewhere."""
import sys

from absl import logging

from .legality import Boundary
from .package_cache import MIL_LOCK

_REFERENCE_LOGGED = []


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
            "reference executor (checks lowering semantics, not Core ML speed or float16 "
            "rounding).", sys.platform)


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


class CoremlExecutable:
    """Callable on one array per graph input; returns the outputs as numpy arrays.

    `.runtime` is "coreml" when Core ML runs the package, "mil-reference" otherwise;
    `.package_path` is the saved .mlpackage."""

    def __init__(self, graph, package_path, input_names, output_names, compute_units):
        self.graph, self.package_path = graph, package_path
        self.input_names, self.output_names = input_names, output_names
        self.boundary = Boundary()
        if coreml_runtime_available():
            import coremltools as ct
            model = ct.models.MLModel(package_path, compute_units=compute_units)
            self._predict = model.predict
            self.runtime = "coreml"
        else:
            from .executor import MilReferenceExecutor
            with MIL_LOCK:
                _log_reference_once()
                self._predict = _serialized(MilReferenceExecutor(package_path))
            self.runtime = "mil-reference"

    def __call__(self, *args):
        if len(args) != len(self.graph.inputs):
            raise TypeError(f"expected {len(self.graph.inputs)} arrays, got {len(args)}")
        names = self.graph.input_names or [None] * len(args)
        feeds = {n: self.boundary.to_model(v, a, _argument(i, names[i]))
                 for i, (n, v, a) in enumerate(zip(self.input_names, self.graph.inputs, args))}
        outs = self._predict(feeds)
        return [self.boundary.from_model(v, outs[n])
                for n, v in zip(self.output_names, self.graph.outputs)]
