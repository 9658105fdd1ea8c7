"""Options, ct.convert, and the content-hashed .mlpackage cache.

Every compile produces a real .mlpackage (`ct.convert(..., skip_model_load=True)` then save),
stored under `$RLX_JAX_CACHE_DIR/coreml` (default `~/.cache/rlx_jax/coreml`) by a hash of the
legalized graph, its constants, the options, the tool versions and this backend's own source
(code_files: a changed lowering builds anew).
"""
import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
import threading
import time

import numpy as np

from .... import progress
from ....errors import BadArgumentError
from ....ir.dims import constraints
from ....ir.ops import OpKind as K
from ....version import __version__
from . import cache as package_cache

OPTIONS = ("minimum_deployment_target", "compute_precision", "compute_units", "optimize",
           "input_names", "output_names", "source", "bfloat16")
BFLOAT16 = ("host", "float32", "float16")     # passes/bfloat16.py
PRECISIONS = ("float32", "float16")
UNITS = {"cpu": "CPU_ONLY", "cpu_and_gpu": "CPU_AND_GPU", "cpu_and_ne": "CPU_AND_NE",
         "all": "ALL"}
OPTIMIZE = ("default", "fast")
MIN_TARGET = "iOS16"


def cache_dir():
    """<cache root>/coreml (see package/cache.py for the entries in it)."""
    return package_cache.cache_dir()


def entry_path(name, key):
    """Where the cached package of graph `name` with hash `key` lives: in a directory of its
    own, next to the record that says it is whole."""
    return os.path.join(cache_dir(), f"{name}-{key}", f"{name}.mlpackage")


def _target(value):
    import coremltools as ct
    if value is None:
        return getattr(ct.target, MIN_TARGET)
    if isinstance(value, str):
        t = getattr(ct.target, value, None)
        if t is None:
            raise BadArgumentError(
                f"minimum_deployment_target={value!r} is not a coremltools target; use one of "
                f"{[n for n in dir(ct.target) if n[:3] in ('iOS', 'mac')]}")
        value = t
    if value.value < getattr(ct.target, MIN_TARGET).value:
        raise BadArgumentError(
            f"minimum_deployment_target {value.name} is below {MIN_TARGET}/macOS13, the lowest "
            f"target whose opset this backend emits")
    return value


class Options:
    """Validated Core ML options (unknown names -> BadArgumentError)."""

    def __init__(self, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise BadArgumentError(
                f"unknown Core ML option(s) {unknown}; known options: {list(OPTIONS)}")
        self.target = _target(options.get("minimum_deployment_target"))
        self.precision = options.get("compute_precision", "float32")
        if self.precision not in PRECISIONS:
            raise BadArgumentError(f"compute_precision must be one of {PRECISIONS}, "
                                   f"got {self.precision!r}")
        self.units = options.get("compute_units", "all")
        if self.units not in UNITS:
            raise BadArgumentError(f"compute_units must be one of {sorted(UNITS)}, "
                                   f"got {self.units!r}")
        self.optimize = options.get("optimize", "default")
        if self.optimize not in OPTIMIZE:
            raise BadArgumentError(f"optimize must be one of {OPTIMIZE}, got {self.optimize!r}")
        self.input_names = options.get("input_names")
        self.output_names = options.get("output_names")
        self.source = options.get("source")
        self.bfloat16 = options.get("bfloat16", "host")
        if self.bfloat16 not in BFLOAT16:
            raise BadArgumentError(f"bfloat16 must be one of {BFLOAT16}, got {self.bfloat16!r}")

    def key(self):
        """What changes the saved package (compute_units only matters at load time)."""
        return repr((self.target.name, self.precision, self.optimize, self.input_names and
                     tuple(self.input_names), self.output_names and tuple(self.output_names),
                     self.source))

    def ct_units(self):
        import coremltools as ct
        return getattr(ct.ComputeUnit, UNITS[self.units])


def code_files():
    """Every source file of this backend (rlx_jax/backends/coreml/: the MIL rules, the graph
    passes, the executor, this package), relative paths in a fixed order."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [os.path.relpath(os.path.join(dirpath, n), root)
                for n in sorted(filenames) if n.endswith(".py")]
    return out


def _code_version():
    """A hash of this backend's own source (code_files), so a changed lowering never reuses a
    package."""
    if not _CODE:
        h = hashlib.sha256()
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for rel in code_files():
            h.update(rel.encode())
            with open(os.path.join(root, rel), "rb") as f:
                h.update(f.read())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


_CODE: list[str] = []


def graph_hash(graph, options):
    import coremltools as ct

    h = hashlib.sha256()
    h.update(graph.as_text(src=False).encode())      # where the code is does not change it
    for v in graph.inputs + graph.outputs:
        h.update(v.type_str().encode())
    for n in graph.walk():             # regions' constants too
        if n.kind is K.Constant:
            val = np.ascontiguousarray(n.attrs["value"])
            h.update(str((val.dtype, val.shape)).encode())
            h.update(val.tobytes())
    h.update(options.key().encode())
    h.update(repr((graph.input_names, graph.output_names)).encode())
    h.update(repr([c.debug_str for c in constraints([v.shape for v in graph.inputs])])
             .encode())                                # a flexible input's bounds
    h.update(f"{ct.__version__}/{__version__}/{_code_version()}".encode())
    return h.hexdigest()[:32]


_IMPORT_LOCK = threading.Lock()


def import_coremltools():
    """Imports coremltools without its Linux warnings that the Core ML runtime cannot load
    (rlx_jax says once which runtime executes packages; see package/runtime.py)."""
    import logging as std_logging
    log = std_logging.getLogger("coremltools")
    with _IMPORT_LOCK:                    # threads must not restore each other's level
        level = log.level
        log.setLevel(std_logging.ERROR)
        try:
            import coremltools
        finally:
            log.setLevel(level)
    return coremltools


@contextlib.contextmanager
def progress_bars():
    """ct.convert draws a tqdm bar per pass pipeline on stderr (created in coremltools'
    pass_pipeline module, which imports `tqdm` by name). rlx_jax keeps them off, except where
    progress is shown (progress.py: in a terminal, or RLX_JAX_PROGRESS=1), where a pipeline's
    bar appears once it has run progress.DELAY_S (tqdm's `delay`) and is cleared when it ends: a
    long conversion shows progress, a short one prints nothing."""
    from coremltools.converters.mil.mil.passes import pass_pipeline
    bar = pass_pipeline.tqdm
    pass_pipeline.tqdm = functools.partial(bar, delay=progress.DELAY_S, leave=False) \
        if progress.enabled() else functools.partial(bar, disable=True)
    try:
        yield
    finally:
        pass_pipeline.tqdm = bar


def convert(mil_program, options, timings=None):
    """ct.convert of a built MilProgram -> ct.models.MLModel (not loaded)."""
    import coremltools as ct
    t0 = time.perf_counter()
    pipeline = ct.PassPipeline.DEFAULT if options.optimize == "default" else \
        ct.PassPipeline.EMPTY
    if options.optimize == "default":
        # it only reorders state updates, and loses track of its own op list when two
        # updates follow their values (a KeyError in coremltools 9 with two states)
        pipeline.remove_passes(["common::canonicalize_inplace_pattern"])
    if options.optimize == "fast" and options.precision == "float16":
        # the empty pipeline would drop the float16 rewrite: keep just that and the folding
        for name in ("common::add_fp16_cast", "common::const_elimination",
                     "common::dead_code_elimination"):
            pipeline.append_pass(name)
    precision = ct.precision.FLOAT32 if options.precision == "float32" else \
        ct.precision.FLOAT16
    with package_cache.MIL_LOCK, progress_bars():
        model = ct.convert(mil_program.program, convert_to="mlprogram", skip_model_load=True,
                           compute_precision=precision, minimum_deployment_target=options.target,
                           pass_pipeline=pipeline, compute_units=options.ct_units())
    if timings is not None:
        timings["ct_convert"] = time.perf_counter() - t0
    return model


def describe(model, graph, options):
    model.short_description = f"rlx_jax {graph.name}"
    model.user_defined_metadata["rlx_jax.version"] = __version__
    model.user_defined_metadata["rlx_jax.function"] = str(options.source or graph.name)
    model.user_defined_metadata["rlx_jax.precision"] = options.precision


def save(model, path, overwrite=True):
    """Saves atomically: write next to `path`, then rename. With overwrite=False a cache entry
    path (entry_path) is published whole with its record (package_cache.publish), and at any
    path a package another process finished first is kept as it is."""
    if not overwrite and package_cache.is_entry(path):
        return package_cache.publish(model, path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-")
    try:
        staged = os.path.join(tmp, os.path.basename(path))
        model.save(staged)
        if os.path.exists(path):
            if not overwrite:
                return path
            shutil.rmtree(path)
        os.replace(staged, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
