"""MLX runtime: dtype tables, argument conversion, the kernel-cache directory and the executable.

Argument conversion (measured with mlx 0.32.4 on Linux): an `mx.array` argument is passed through
untouched; numpy arrays, jax arrays and Python scalars are copied into a new `mx.array` (MLX has
no zero-copy import of foreign memory: `mx.array(np)` and `mx.from_dlpack` both copy, ~0.1 ms per
4 MB). A jax CPU array is first viewed as numpy (`np.asarray`, zero-copy), then copied once,
except a jax.Array that an MLX program returned (`to_jax`): it remembers its mx.array, which is
passed as it is. Non-contiguous numpy views (reversed, strided) are made contiguous first.
Outputs (`output_converter`, the jit option `output`): jax.Arrays by default (jax_arrays.py:
aliasing 64-byte aligned MLX buffers, one copy of others), numpy views, or the mx.arrays
themselves (`output="native"`); feeding any of them back copies nothing.

Kernel cache: on CPU, `mx.compile` writes generated C++ and the `g++`-built shared objects under
`std::filesystem::temp_directory_path() / "mlx"`, i.e. `$TMPDIR/mlx` (read from the environment
at every kernel build). The executable points `TMPDIR` at the package's cache root
(`$RLX_JAX_CACHE_DIR`, else `~/.cache/rlx_jax`) only while it builds kernels -- its first call,
which is evaluated eagerly for that reason -- and restores it right after, so the user's TMPDIR
is untouched for everything else (a later call that needs a new kernel variant, e.g. for
non-contiguous inputs, builds it under the user's TMPDIR). Kernels sit in
`cache_dir()/<mlx version>/cpu`, cache_dir() = `<root>/mlx`. With Metal (macOS GPU) kernels are
built in memory and nothing is written. kernel_cache.py keeps that directory sound (libraries cut
short, builds of several threads and processes); an unwritable root falls back to a temporary one
(rlx_jax/cache.py).
"""
import os
import shutil
import threading
import weakref
from typing import Any

import jax
import mlx.core as mx
import numpy as np
from absl import logging

from ... import arguments, cache, jax_arrays
from ...cache import CacheDirError
from ...errors import LoweringError, RefusalError, RlxError
from ..base import Executable
from ... import progress
from .kernel_cache import building_kernels, built_kernels, remove_unloadable

try:
    import ml_dtypes
    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:   # pragma: no cover - ml_dtypes ships with jax
    _BF16 = None

_PAIRS = [
    (np.bool_, mx.bool_), (np.int8, mx.int8), (np.int16, mx.int16), (np.int32, mx.int32),
    (np.int64, mx.int64), (np.uint8, mx.uint8), (np.uint16, mx.uint16),
    (np.uint32, mx.uint32), (np.uint64, mx.uint64), (np.float16, mx.float16),
    (np.float32, mx.float32), (np.float64, mx.float64), (np.complex64, mx.complex64),
]
NP_TO_MX = {np.dtype(n): m for n, m in _PAIRS}
if _BF16 is not None:
    NP_TO_MX[_BF16] = mx.bfloat16
MX_TO_NP = {m: n for n, m in NP_TO_MX.items()}


def mlx_to_np_dtype(dtype):
    """The numpy dtype of an MLX dtype (bfloat16 -> ml_dtypes.bfloat16)."""
    try:
        return MX_TO_NP[dtype]
    except KeyError:
        raise LoweringError(f"MLX dtype {dtype} has no numpy equivalent rlx_jax supports") \
            from None


def to_mx_dtype(dtype, what="value"):
    dt = np.dtype(dtype)
    if dt not in NP_TO_MX:
        raise RefusalError(f"backend 'mlx' does not support dtype {dt.name} ({what}); "
                            f"use float32/float16/bfloat16/complex64/int/uint/bool")
    return NP_TO_MX[dt]


def to_numpy(x):
    """An evaluated mx.array as numpy (zero-copy view; bfloat16 through a uint16 view)."""
    if x.dtype == mx.bfloat16:
        return np.asarray(x.view(mx.uint16)).view(_BF16)
    return np.asarray(x)


# id(jax.Array made by to_jax) -> (weak reference to it, its mx.array)
_BACKING: dict[int, tuple[Any, Any]] = {}


def _forget(key):
    def drop(_ref):
        _BACKING.pop(key, None)
    return drop


def to_jax(xs, weak=(), convert=None):
    """Evaluated mx.arrays as jax.Arrays (weakly typed where `weak` says) that remember them:
    passed back to an MLX program, a jax.Array's mx.array is used and nothing is copied. Each
    is made by a jax_arrays.Converter (`convert`, one per program) from a numpy view of the MLX
    buffer: aliased where the buffer is 64-byte aligned (Metal's page-aligned buffers), else
    copied once (this CPU allocator's 8- or 16-byte aligned ones); each mx.array lives as
    long as its jax.Array."""
    outs = (convert or jax_arrays.Converter(weak))([to_numpy(x) for x in xs])
    for out, x in zip(outs, xs):
        key = id(out)
        _BACKING[key] = (weakref.ref(out, _forget(key)), x)
    return outs


def backing_array(x):
    """The mx.array behind a jax.Array made by to_jax, else None."""
    entry = _BACKING.get(id(x))
    if entry is not None and entry[0]() is x:
        return entry[1]
    return None


def _cache_root():
    return cache.cache_root()


def cache_dir():
    """Where MLX's compiled CPU kernels go: <root>/mlx/<mlx version>/cpu (MLX appends the
    version and device itself); root = $RLX_JAX_CACHE_DIR or ~/.cache/rlx_jax, or a temporary
    stand-in when that is not writable (see rlx_jax/cache.py)."""
    return os.path.join(_cache_root(), "mlx")


def compile_unavailable_reason():
    """Why mx.compile cannot build kernels here (None when it can)."""
    if os.environ.get("RLX_JAX_MLX_COMPILE", "1") == "0":
        return "RLX_JAX_MLX_COMPILE=0 is set"
    if mx.default_device() == mx.cpu and shutil.which("g++") is None:
        return "MLX compiles CPU kernels with g++, which is not on PATH"
    return None


# reasons logged, oldest first; bounded so that retraces cannot grow it
_LOGGED: dict[Any, None] = {}
_LOGGED_MAX = 256
_LOG_LOCK = threading.Lock()


def log_once(key, msg):
    """Logs `msg` unless `key` was logged already (among the last _LOGGED_MAX keys)."""
    with _LOG_LOCK:
        if key in _LOGGED:
            return
        _LOGGED[key] = None
        if len(_LOGGED) > _LOGGED_MAX:
            del _LOGGED[next(iter(_LOGGED))]
    logging.warning(msg)


def _evaluated(outs):
    mx.eval(outs)
    return outs


def _converter(dtype):
    mxdt = to_mx_dtype(dtype, "argument")

    def convert(x):
        if type(x) is mx.array:
            return x.astype(mxdt)
        if isinstance(x, jax.Array):
            back = backing_array(x)
            if back is not None:               # a result of an MLX program, fed back
                return back if back.dtype == mxdt else back.astype(mxdt)
            x = np.asarray(x)                  # zero-copy on CPU
        elif not isinstance(x, (np.ndarray, np.generic, bool, int, float)):
            x = np.asarray(x)                  # lists, other array types, ...
        if isinstance(x, np.ndarray) and not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)        # MLX imports no negative or gapped strides
        return mx.array(x, dtype=mxdt)
    return convert


_SIGNATURE_DTYPES = {x64: {m: arguments.narrowed(n, x64) for m, n in MX_TO_NP.items()}
                     for x64 in (False, True)}


def _mx_signature(x, x64, _dtypes=_SIGNATURE_DTYPES):
    """arguments.FAST_SIGNATURES for an mx.array leaf (shape, numpy dtype, never weak)."""
    return (tuple(x.shape), _dtypes[x64][x.dtype], False)


arguments.FAST_SIGNATURES[mx.array] = _mx_signature
arguments.PLAIN_ARRAY_TYPES.add(mx.array)


def to_mx(x, dtype):
    """`x` (numpy, jax or mx array) as an mx.array of IR dtype `dtype` (copied unless it is
    already one)."""
    return _converter(dtype)(x)


def _numpy_outputs(outs):
    mx.eval(outs)
    return [to_numpy(o) for o in outs]


def _jax_outputs(weak):
    converter = jax_arrays.Converter(weak)

    def convert(outs):
        mx.eval(outs)
        return to_jax(outs, convert=converter)
    convert.gives_weak_types = converter.gives_weak_types
    return convert


def output_converter(output, weak=()):
    """outs -> outs for jit's `output` option: None for "native" (the mx.arrays)."""
    return {"native": None, "numpy": _numpy_outputs}[output] if output != "jax" \
        else _jax_outputs(weak)


class MlxExecutable(Executable):
    """Runs a lowered graph: converts arguments, calls the (compiled) MLX function. `fn` is the
    eager function; compiled, it is `mx.compile(fn)`, or `compiled_fn` when given (a graph with
    host loops: compiled segments around them, lower.py)."""

    def __init__(self, name, fn, in_dtypes, compile=True, compiled_fn=None):
        self.name = name
        self._raw = fn
        self._convs = [_converter(d) for d in in_dtypes]
        self._mx_dtypes = [to_mx_dtype(d) for d in in_dtypes]
        self.compiled = False
        self.why_uncompiled = None
        reason = compile_unavailable_reason() if compile else "compile=False was requested"
        if reason is None:
            self._fn = mx.compile(fn) if compiled_fn is None else compiled_fn
            self.compiled = True
        else:
            self._fn = fn
            self.why_uncompiled = reason
            if compile:
                log_once(reason, f"rlx_jax mlx backend: running uncompiled (no kernel fusion): "
                                 f"{reason}")
        self._call = self._first_call
        self.runtime = "mlx-compiled" if self.compiled else "mlx-eager"

    def _first_call(self, *ins):
        """Builds kernels under cache_dir(); falls back to eager MLX when mx.compile fails."""
        try:
            outs = self._build(ins) if self.compiled else self._fn(*ins)
        except CacheDirError as e:
            outs = self._uncompiled(ins, str(e))
        except RlxError:
            raise
        except Exception as e:  # noqa: BLE001 - compile failure: say why once, run eagerly
            if not self.compiled:
                raise
            outs = self._uncompiled(
                ins, f"mx.compile failed on '{self.name}': {type(e).__name__}: {e}")
        self._call = self._fn
        return outs

    def _build(self, ins):
        """The first compiled call, evaluated while kernels may be built into the cache; a
        cached kernel library MLX cannot load is removed and the call retried once."""
        with building_kernels() as root, progress.watch(
                f"building MLX kernels for '{self.name}'", lambda: built_kernels(root)):
            try:
                return _evaluated(self._fn(*ins))
            except RuntimeError as e:
                if not remove_unloadable(e, root):
                    raise
                return _evaluated(self._fn(*ins))

    def _uncompiled(self, ins, reason):
        log_once(reason, f"rlx_jax mlx backend: running uncompiled: {reason}")
        self._fn, self.compiled, self.why_uncompiled = self._raw, False, reason
        self.runtime = "mlx-eager"
        return self._fn(*ins)

    def inputs(self, args):
        """The mx.arrays the program is called with: mx.arrays of its dtypes as they are, other
        arguments converted (to_mx)."""
        return [a if type(a) is mx.array and a.dtype == dt else cv(a)
                for a, dt, cv in zip(args, self._mx_dtypes, self._convs)]

    def __call__(self, *args):        # self.inputs(args), inline: the cached call's hot path
        return self._call(*[a if type(a) is mx.array and a.dtype == dt else cv(a)
                            for a, dt, cv in zip(args, self._mx_dtypes, self._convs)])
