"""rlx_jax.export_coreml: trace, legalize and save a function as an .mlpackage; at symbolic
shapes, a package with flexible inputs (backends/coreml/package/flexible.py)."""
import os

from .api import jit
from .backends.coreml.backend import CoremlBackend, write_package
from .backends.coreml.package import Options
from .errors import BadArgumentError
from .placement import raise_host
from .symbolic import SymbolicLowered


def export_coreml(fun, *args, path, **options):
    """Saves `fun` traced at `args` as a Core ML .mlpackage at `path` (returns the path).

    Model inputs/outputs are named after the argument / result pytree paths, e.g.
    `params_w`, `x`, `output`. Options are the Core ML backend's (compute_precision,
    minimum_deployment_target, optimize, ...); `static_argnums` marks static arguments.

    With `jax.ShapeDtypeStruct`s of symbolic shape (jax.export.symbolic_shape("b, t",
    constraints=["t <= 512"])) the inputs are flexible: each symbolic dimension a RangeDim
    bounded by the constraints (`default_sizes={"t": 64}` sets the default; the lower bound
    otherwise), or with `enumerated_sizes=[{"t": 64}, {"t": 128}]` EnumeratedShapes.
    """
    if not str(path).endswith(".mlpackage"):
        raise BadArgumentError(f"path must end in .mlpackage, got {path!r}")
    static = options.pop("static_argnums", ())
    default_sizes = options.pop("default_sizes", None)
    enumerated = options.pop("enumerated_sizes", None)
    if "compute_units" in options:
        raise BadArgumentError(
            "export_coreml: compute_units is not stored in an .mlpackage; Core ML picks the "
            "units when the package is loaded: coremltools.models.MLModel(path, "
            "compute_units=coremltools.ComputeUnit.CPU_AND_NE) in Python, or "
            "MLModelConfiguration.computeUnits in an app")
    lowered = jit(fun, backend="coreml", static_argnums=static).lower(*args)
    opts = Options(source=options.pop("source", None) or getattr(fun, "__qualname__",
                                                                  repr(fun)),
                   **options)
    if isinstance(lowered, SymbolicLowered):
        lowered = lowered.placed()
    elif default_sizes or enumerated:
        raise BadArgumentError("default_sizes / enumerated_sizes are for symbolic shapes: pass "
                               "jax.ShapeDtypeStructs of jax.export.symbolic_shape(...)")
    assert isinstance(lowered.backend, CoremlBackend)
    placed = lowered.placement()
    if not placed.device_only:
        raise_host(placed.graph, placed.backend, placed.host, what="export",
                   todo="An .mlpackage holds one Core ML program and no host code: rewrite "
                        "these ops (or move them out of the exported function), or run the "
                        "function with rlx_jax.jit(..., backend='coreml'), which runs them on "
                        "the host between Core ML segments.")
    return write_package(lowered.legalized, opts, os.fspath(path), lowered.timings,
                         sizes=(default_sizes, enumerated))
