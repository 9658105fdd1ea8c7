"""Every on-disk cache entry is checked against the content hash recorded when it was written
before it is used: damaged bytes of the same size are found in the NEXT process, which logs
once, sets the entry aside, rebuilds it and gives JAX's answer on the device.

Covered: a Core ML package with 64 bytes flipped in the middle of weight.bin (it used to run,
max error 2.0), a record of an older rlx_jax (sizes only), an MLX kernel library with 64 bytes
of its machine code flipped (it used to crash the process), a library without a record, and a
pattern-cache pickle changed so that it still unpickles. Each damage is done between two
processes, as a disk, a copy or an editor would do it. The older-record, unlisted-file and
library-without-record cases run in the slow step (each is two subprocesses). The cost of the
checks: benchmarks/bench_cache_verify.py.
"""
import glob
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import rlx_jax

BACKENDS = rlx_jax.available_backends()
needs_mlx = pytest.mark.skipif("mlx" not in BACKENDS, reason="mlx is not installed")
needs_coreml = pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is missing")
DEVICE = [b for b in ("coreml", "mlx") if b in BACKENDS]

# Runs program argv[2] on backend argv[1]: where it runs (every op on the device; MLX through
# mx.compile), its answer against jax.jit's, and for "log_softmax" that recognition found it.
CHILD = """
import sys, numpy as np, jax, jax.numpy as jnp, rlx_jax
w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
programs = {"tanh": lambda x: jnp.tanh(x @ w) * 1.5 - jnp.cos(x @ w),
            "log_softmax": lambda x: jax.nn.log_softmax(x @ w * 0.1, axis=-1)}
backend, name = sys.argv[1:3]
f = programs[name]
lowered = rlx_jax.jit(f, backend=backend).lower(x)
assert lowered.placement().device_only, lowered.placement()
if name == "log_softmax":
    assert "LogSoftmax" in lowered.as_text(), lowered.as_text()
compiled = lowered.compile()
np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(jax.jit(f)(x)),
                           rtol=1e-5, atol=1e-5)
assert compiled.runtime in ("mlx-compiled", "mil-reference", "coreml", "xla"), compiled.runtime
print("ok", flush=True)
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(root))
    monkeypatch.delenv("RLX_JAX_PATTERN_CACHE", raising=False)
    return root


def _run(cache, backend, program="tanh"):
    """The child's stderr; it must have said ok."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "RLX_JAX_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", CHILD, backend, program], env=env, text=True,
                       capture_output=True, timeout=300)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), (r.returncode,
                                                                    r.stderr[-3000:])
    return r.stderr


def _flip(path, start, n=64):
    """XORs n bytes of `path` at `start` with 0xFF (the size stays the same)."""
    with open(path, "r+b") as f:
        f.seek(start)
        data = f.read(n)
        f.seek(start)
        f.write(bytes(b ^ 0xFF for b in data))


def _only(pattern):
    got = glob.glob(pattern)
    assert len(got) == 1, got
    return got[0]


# ---- Core ML packages ----

def _entry(cache):
    return _only(str(cache / "coreml" / "*" / "*.mlpackage"))


@needs_coreml
def test_flipped_weights_are_found_in_the_next_process_and_rebuilt(cache):
    from rlx_jax.backends.coreml.package.cache import problem
    assert "cannot be used" not in _run(cache, "coreml")
    path = _entry(cache)
    weights = os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin")
    whole = open(weights, "rb").read()
    _flip(weights, len(whole) // 2)
    assert os.path.getsize(weights) == len(whole)
    err = _run(cache, "coreml")                     # used to run them: max error 2.0
    said = [ln for ln in err.splitlines() if "cannot be used" in ln]
    assert len(said) == 1, err[-3000:]
    assert path in said[0] and "weight.bin does not match the sha256" in said[0]
    assert _entry(cache) == path and problem(path) is None
    assert open(weights, "rb").read() == whole      # the damaged copy is gone, rebuilt whole
    assert not glob.glob(str(cache / "coreml" / ".t*"))       # nothing left aside
    assert "cannot be used" not in _run(cache, "coreml")      # the rebuilt entry is used


@needs_coreml
@pytest.mark.slow
def test_record_without_hashes_is_not_trusted(cache):
    """A record of an older rlx_jax (file sizes only) vouches for nothing: rebuilt."""
    from rlx_jax.backends.coreml.package.cache import RECORD, problem
    _run(cache, "coreml")
    path = _entry(cache)
    record = os.path.join(os.path.dirname(path), RECORD)
    with open(record) as f:
        files = json.load(f)["files"]
    with open(record, "w") as f:
        json.dump({"files": {rel: size for rel, size, _ in files}}, f)
    err = _run(cache, "coreml")
    assert err.count("holds no content hash (written by an older rlx_jax)") == 1, err[-3000:]
    assert problem(path) is None


@needs_coreml
@pytest.mark.slow
def test_a_file_the_record_does_not_list_is_found(cache):
    from rlx_jax.backends.coreml.package.cache import problem
    _run(cache, "coreml")
    path = _entry(cache)
    with open(os.path.join(path, "Data", "extra.bin"), "wb") as f:
        f.write(b"x")
    assert "which its record does not list" in problem(path)
    assert _run(cache, "coreml").count("cannot be used") == 1
    assert problem(path) is None


# ---- MLX kernel libraries ----

def _text_section(lib):
    """(offset, size) of the .text section (the kernel's machine code) of an ELF64 library."""
    data = open(lib, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shent, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i):
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shent)
        return name, off, size
    names = section(shstrndx)[1]
    for i in range(shnum):
        name, off, size = section(i)
        if data[names + name:data.index(b"\0", names + name)] == b".text":
            return off, size
    raise AssertionError(f"{lib} has no .text section")


def _libraries(cache):
    libs = glob.glob(str(cache / "mlx" / "*" / "cpu" / "lib*.so"))
    if not libs:
        pytest.skip("mx.compile built no kernel library here (no g++?)")
    return libs


@needs_mlx
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF libraries")
def test_flipped_kernel_code_is_found_in_the_next_process_and_rebuilt(cache):
    from rlx_jax.backends.mlx.kernel_cache import library_problem
    _run(cache, "mlx")
    libs = _libraries(cache)
    damaged = {}
    for lib in libs:                     # 64 bytes in the middle of the code (not padding)
        off, size = _text_section(lib)
        _flip(lib, off + max(0, size // 2 - 32), min(64, size))
        damaged[lib] = open(lib, "rb").read()
    err = _run(cache, "mlx")             # used to die of SIGSEGV running the flipped code
    said = [ln for ln in err.splitlines() if "removed the kernel library" in ln]
    assert len(said) == len(libs), err[-3000:]
    assert all("does not match the sha256 recorded when it was built" in ln for ln in said)
    assert sorted(lib for lib in libs if any(lib in ln for ln in said)) == sorted(libs)
    for lib in libs:                     # rebuilt (g++ output differs a little) and recorded
        assert library_problem(lib) is None and open(lib, "rb").read() != damaged[lib]
    assert "removed" not in _run(cache, "mlx")


@needs_mlx
@pytest.mark.slow
def test_kernel_library_without_a_record_is_rebuilt(cache):
    """Libraries of an older rlx_jax (or a build killed before its record) are not loaded."""
    from rlx_jax.backends.mlx.kernel_cache import RECORDS, library_problem
    _run(cache, "mlx")
    libs = _libraries(cache)
    shutil.rmtree(os.path.join(os.path.dirname(libs[0]), RECORDS))
    err = _run(cache, "mlx")
    assert err.count("without a recorded hash") == 1, err[-3000:]
    assert all(library_problem(lib) is None for lib in libs)


# ---- the pattern cache ----

def _pattern_entry(cache, name, shape):
    """(file, payload) of the cached graph of reference `name` traced at `shape`."""
    from rlx_jax.passes import template_cache
    for path in glob.glob(str(cache / "patterns" / "*" / "*.pkl")):
        data = open(path, "rb").read()
        payload = template_cache.checked_payload(path, data)
        key, _ = pickle.loads(payload)
        if key.startswith(repr((name, ("x",), ((shape, np.dtype(np.float32)),)))[:-1]):
            return path, payload
    raise AssertionError(f"no cached graph of {name} at {shape}")


def test_changed_pattern_pickle_that_still_unpickles_is_found(cache):
    from rlx_jax.passes import template_cache
    backend = DEVICE[0] if DEVICE else "xla"
    _run(cache, backend, "log_softmax")
    path, payload = _pattern_entry(cache, "jax.nn.log_softmax", (8, 256))
    assert payload.count(b"\x8c\x03sub") == 1
    damaged = payload.replace(b"\x8c\x03sub", b"\x8c\x03add")   # x - max(x) -> x + max(x)
    assert "fn=add" in pickle.loads(damaged)[1].as_text()     # it still unpickles
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) - len(payload)] + damaged)
    err = _run(cache, backend, "log_softmax")
    said = [ln for ln in err.splitlines() if "cached pattern graph" in ln]
    assert len(said) == 1 and path in said[0] and "sha256 differs" in said[0], err[-3000:]
    again = template_cache.checked_payload(path, open(path, "rb").read())  # traced and stored anew
    assert again is not None and "fn=sub" in pickle.loads(again)[1].as_text()
