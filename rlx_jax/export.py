"""rlx_jax.export_coreml: trace, legalize and save a function as an .mlpackage; at symbolic
shapes, a package with flexible inputs (backends/coreml/package/flexible.py); with `weights=`,
compressed (package/compress.py); with an app's metadata (package/app.py)."""
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax

from .api import jit
from .backends.coreml.backend import CoremlBackend, write_package
from .backends.coreml.package import Options, app, compress, multifunction
from .errors import BadArgumentError
from .placement import raise_host
from .stages import Lowered
from .symbolic import SymbolicLowered


def export_coreml(fun: Callable[..., Any] | dict[str, tuple[Callable[..., Any], tuple[Any, ...]]],
                  *args: Any, path: str | os.PathLike[str], **options: Any) -> str:
    """Saves `fun` traced at `args` as a Core ML .mlpackage at `path` (returns the path).

    Model inputs/outputs are named after the argument / result pytree paths, e.g.
    `params_w`, `x`, `output`. Options are the Core ML backend's (compute_precision,
    minimum_deployment_target, optimize, ...); `static_argnums` marks static arguments.

    With `jax.ShapeDtypeStruct`s of symbolic shape (jax.export.symbolic_shape("b, t",
    constraints=["t <= 512"])) the inputs are flexible: each symbolic dimension a RangeDim
    bounded by the constraints (`default_sizes={"t": 64}` sets the default; the lower bound
    otherwise), or with `enumerated_sizes=[{"t": 64}, {"t": 128}]` EnumeratedShapes.

    `weights="int8" | "int4" | "palette4" | ...` compresses the model's constant weights
    (package/compress.py; `rlx_jax.compression_report(path)` reads what it did). `author`,
    `version`, `license`, `description`, `input_descriptions` and `output_descriptions`
    ({name: text}) are written into the package for an app (package/app.py).

    `fun` may be a dict {name: (function, args)}: one multifunction package whose functions
    share their identical weights (`default_function=` names the default; iOS18 and later;
    package/multifunction.py); every option applies to each function.
    """
    if not str(path).endswith(".mlpackage"):
        raise BadArgumentError(f"path must end in .mlpackage, got {path!r}")
    if isinstance(fun, dict):
        if args:
            raise BadArgumentError("export_coreml: with a dict of functions, give each its "
                                   "arguments in the dict ({name: (function, args)}), none "
                                   "after it")
        return cast(str, multifunction.export(export_coreml, fun, path,
                                              options.pop("default_function", None), options))
    static = options.pop("static_argnums", ())
    default_sizes = options.pop("default_sizes", None)
    enumerated = options.pop("enumerated_sizes", None)
    weights = options.pop("weights", None)
    state = options.pop("state", None)
    about = app.pop_metadata(options)
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
    if weights is not None:
        compress.config(weights, opts.target)          # a bad mode is refused before building
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
    finish = app.describer(about)
    if weights is None:
        return cast(str, write_package(lowered.legalized, opts, os.fspath(path), lowered.timings,
                                       sizes=(default_sizes, enumerated), finish=finish,
                                       state=state))
    staging = tempfile.mkdtemp(prefix="rlx-float-")
    try:
        float_path = write_package(lowered.legalized, opts,
                                   os.path.join(staging, os.path.basename(str(path))),
                                   lowered.timings, sizes=(default_sizes, enumerated),
                                   finish=finish, state=state)
        compress.compress(float_path, os.fspath(path), weights, opts.target,
                          _feeds(lowered, float_path, args, static))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return os.fspath(path)


def _feeds(lowered: Lowered, package_path: str, args: tuple[Any, ...],
           static: int | Sequence[int]) -> dict[str, Any] | None:
    """The export's example arguments as the package's feeds, or None when they are not all
    concrete arrays (ShapeDtypeStructs: the compression report then has no error figure)."""
    from .backends.coreml.executor.reference import MilReferenceExecutor
    from .backends.coreml.mil.legality import Boundary
    statics = {static} if isinstance(static, int) else set(static)
    leaves = jax.tree_util.tree_leaves([a for i, a in enumerate(args) if i not in statics])
    if any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves):
        return None
    names = MilReferenceExecutor(package_path).all_input_names
    graph = lowered.legalized
    if len(names) != len(graph.inputs) or len(leaves) != len(graph.inputs):
        return None
    boundary = Boundary()
    return {n: boundary.to_model(v, x) for n, v, x in zip(names, graph.inputs, leaves)}
