"""Faults around the caches and threads: every program still gives JAX's answer (or a clear
RlxError), and nothing is left locked or half-written.

Covered: a cache path that is a regular file or lies under one, a read-only cache directory
(for root too), truncated MLX kernel libraries and Core ML packages, a save cut short, two
processes compiling the same programs into one empty cache, a process SIGKILLed mid-compile,
16 threads compiling and calling at once, no g++ on PATH. Each test has a fresh
RLX_JAX_CACHE_DIR; subprocesses run JAX on the CPU. Damaged bytes of the same size, found by
the content hashes: tests/test_cache_verify.py. Memory: tests/test_memory.py.
"""
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.cache import CacheDirError

BACKENDS = rlx_jax.available_backends()
needs_mlx = pytest.mark.skipif("mlx" not in BACKENDS, reason="mlx is not installed")
needs_coreml = pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is missing")
CACHED = [b for b in ("mlx", "coreml") if b in BACKENDS]
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)

# Compiles N programs on each backend named in argv[1], checks each against jax.jit, says ok.
CHILD = """
import sys, numpy as np, jax, jax.numpy as jnp, rlx_jax
def make(k):
    return lambda x: jnp.tanh(x * (k + 1.5)) - jnp.cos(x) * k
x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
for b in sys.argv[1].split(","):
    for k in range(int(sys.argv[2])):
        print("compiling", b, k, flush=True)
        f = make(k)
        opts = {"optimize": "fast"} if b == "coreml" else {}
        got = np.asarray(rlx_jax.jit(f, backend=b, **opts)(x))
        np.testing.assert_allclose(got, np.asarray(jax.jit(f)(x)), rtol=1e-5, atol=1e-5)
print("ok", flush=True)
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(root))
    return root


def _env(cache, **extra):
    return {**os.environ, "JAX_PLATFORMS": "cpu", "RLX_JAX_CACHE_DIR": str(cache), **extra}


def _child(cache, backends, n=10, **popen):
    return subprocess.Popen([sys.executable, "-c", CHILD, ",".join(backends), str(n)],
                            env=_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def _ok(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0 and out.rstrip().endswith("ok"), (proc.returncode, err[-3000:])
    return err


def _python(code, cache, **env):
    r = subprocess.run([sys.executable, "-c", code], env=_env(cache, **env), text=True,
                       capture_output=True, timeout=240)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), (r.returncode, r.stderr[-3000:])
    return r.stderr


def _check(fn, backend, *args, **options):
    got = rlx_jax.jit(fn, backend=backend, **options)(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(fn)(*args)),
                               rtol=1e-5, atol=1e-5)


def _free(lock):
    """Whether another thread can take `lock` now (works for RLocks too)."""
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=5) and lock.release()))
    t.start()
    t.join()
    return got == [None]


def _locks():
    out = []
    if "mlx" in BACKENDS:
        from rlx_jax.backends.mlx import kernel_cache
        out.append(kernel_cache._BUILD_LOCK)
    if "coreml" in BACKENDS:
        from rlx_jax.backends.coreml.package.cache import MIL_LOCK
        out.append(MIL_LOCK)
    return out


def _sound(cache):
    """Nothing half-written under `cache`: every MLX library whole and matching its record,
    every Core ML entry whole and matching its hashes, no staging dirs."""
    from rlx_jax.backends.mlx.kernel_cache import is_bad_library, library_problem
    from rlx_jax.backends.coreml.package.cache import problem
    libs = list(cache.glob("mlx/*/cpu/lib*.so"))
    assert not [p for p in libs if is_bad_library(str(p)) or library_problem(str(p))]
    assert not list(cache.glob("mlx/*/cpu/tmp_*"))
    entries = list(cache.glob("coreml/*/*.mlpackage"))
    assert not [(p, problem(str(p))) for p in entries if problem(str(p))]
    assert not list(cache.glob("coreml/.tmp-*")) + list(cache.glob("coreml/.trash-*"))
    return libs, entries


# ---- the cache path is unusable: a logged fallback, programs still run ----

@pytest.mark.parametrize("backend", CACHED)
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_unusable_cache_path_falls_back_once_and_never_hangs(backend, where, cache, monkeypatch,
                                                             caplog):
    cache.parent.mkdir(exist_ok=True)
    cache.write_text("not a directory")
    bad = cache if where == "file" else cache / "sub"
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(bad))
    done = []

    def work():
        for k in range(3):            # the second program used to hang on a held lock
            _check(lambda x, k=k: jnp.sin(x) * (k + 2.0) - x, backend, X)
        done.append(True)
    with caplog.at_level(logging.WARNING):
        t = threading.Thread(target=work, daemon=True)
        t.start()
        t.join(120)
    assert done, "a program hung or failed with the cache path a file"
    said = [r.getMessage() for r in caplog.records if "is not usable" in r.getMessage()]
    assert len(said) <= 1 and all(str(bad) in m and "RLX_JAX_CACHE_DIR" in m for m in said)
    assert all(_free(lock) for lock in _locks())


def test_unusable_cache_path_is_logged_once_per_process(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("x")
    code = ("import numpy as np, rlx_jax, jax.numpy as jnp\n"
            f"for b in {CACHED!r}:\n"
            "    for k in range(2):\n"
            "        f = rlx_jax.jit(lambda x: jnp.exp(x) * (k + 1.0), backend=b)\n"
            "        np.testing.assert_allclose(np.asarray(f(np.zeros(3, np.float32))), k + 1)\n"
            "print('ok')\n")
    err = _python(code, bad)
    assert err.count("is not usable") == 1, err[-3000:]
    assert f"cache directory {bad} is not usable" in err and "RLX_JAX_CACHE_DIR" in err


def _read_only(cache):
    """(a cache path no process can write, the error the probe meets): a directory of mode
    0o500 stops a user, but not root, whom mode bits do not stop; then a path below a regular
    file, where mkdir fails with ENOTDIR for everyone."""
    cache.mkdir()
    cache.chmod(0o500)
    try:
        (cache / "probe").write_text("")
    except PermissionError:
        return cache, "PermissionError"
    (cache / "probe").unlink()
    cache.chmod(0o700)
    regular = cache / "file"
    regular.write_text("not a directory")
    return regular / "sub", "NotADirectoryError"


@pytest.mark.parametrize("backend", CACHED)
def test_read_only_cache_dir_falls_back(backend, cache, monkeypatch, caplog):
    bad, error = _read_only(cache)
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(bad))
    try:
        with caplog.at_level(logging.WARNING):
            _check(lambda x: jnp.cos(x) * 3.0, backend, X)
    finally:
        cache.chmod(0o700)
    said = [r.getMessage() for r in caplog.records if "is not usable" in r.getMessage()]
    assert len(said) == 1, said
    assert f"cache directory {bad} is not usable ({error}" in said[0], said[0]
    assert "caching in" in said[0] and "Set RLX_JAX_CACHE_DIR to a writable" in said[0]


def test_no_usable_directory_at_all_is_a_clear_error(tmp_path, monkeypatch):
    from rlx_jax import cache as cache_mod
    bad = tmp_path / "file"
    bad.write_text("x")
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(bad))
    monkeypatch.setattr(cache_mod, "_FALLBACK", {})
    monkeypatch.setattr(cache_mod.tempfile, "mkdtemp", lambda **k: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")))
    with pytest.raises(CacheDirError, match="RLX_JAX_CACHE_DIR") as e:
        cache_mod.cache_root()
    assert str(bad) in str(e.value) and isinstance(e.value, errors.RlxError)


# ---- MLX: kernel libraries cut short ----

def _libraries(cache):
    libs = list(cache.glob("mlx/*/cpu/*.so"))
    if not libs:
        pytest.skip("mx.compile built no kernel library here (no g++?)")
    return libs


def _one_program_built(cache):
    """The child program (one MLX program) and the kernel libraries its first run built."""
    code = CHILD.replace("sys.argv[1]", "'mlx'").replace("int(sys.argv[2])", "1")
    _python(code, cache)
    return code, _libraries(cache)


@needs_mlx
def test_truncated_kernel_library_is_removed_and_rebuilt(cache):
    code, libs = _one_program_built(cache)
    size = libs[0].stat().st_size
    for lib in libs:                          # a build killed mid-write: header, no tables
        with open(lib, "r+b") as f:
            f.truncate(size // 3)
    err = _python(code, cache)                # used to die of SIGBUS loading the library
    assert "removed the kernel library" in err and "cut short" in err, err[-3000:]
    assert [p.stat().st_size for p in libs] == [size] * len(libs)    # rebuilt whole
    assert "running uncompiled" not in err


@needs_mlx
def test_sweep_removes_only_bad_libraries(cache, monkeypatch):
    from rlx_jax import cache as cache_mod
    from rlx_jax.backends.mlx import kernel_cache
    _check(lambda x: jnp.sin(x) * 2.5, "mlx", X)
    libs = _libraries(cache)
    good = libs[0].read_bytes()
    cpu = libs[0].parent

    def library(name, data, damage=None):
        """A library written as a build would write it (with its record), then damaged."""
        (cpu / name).write_bytes(data)
        kernel_cache.record_library(str(cpu / name))
        if damage is not None:
            (cpu / name).write_bytes(damage)
    library("libcopy.so", good)
    library("libempty.so", good, b"")
    library("libhalf.so", good, good[:len(good) // 2])
    library("libflipped.so", good, good[:100] + bytes(b ^ 0xFF for b in good[100:164]) +
            good[164:])
    library("libnotelf.so", b"garbage" * 20)          # not a library: never recorded
    (cpu / "libunrecorded.so").write_bytes(good)     # no record: an older rlx_jax's
    kernel_cache._SCANNED.clear()                    # as in a new process
    monkeypatch.setattr(kernel_cache, "_CHECKED", cache_mod.Checked())
    kernel_cache.sweep(str(cache / "mlx"))
    assert sorted(p.name for p in cpu.glob("*.so")) == sorted([libs[0].name, "libcopy.so"])
    records = cpu / kernel_cache.RECORDS
    assert sorted(p.name for p in records.iterdir()) == sorted(
        os.path.basename(kernel_cache.record_path(str(cpu / n))) for n in
        (libs[0].name, "libcopy.so"))


@needs_mlx
def test_unloadable_library_is_removed_and_the_call_retried(cache):
    from rlx_jax.backends.mlx.kernel_cache import record_library
    code, libs = _one_program_built(cache)
    for lib in libs:                         # whole, but not loadable: e_type is garbage
        data = bytearray(lib.read_bytes())
        data[0x10] = 0x7F
        lib.write_bytes(bytes(data))
        record_library(str(lib))             # as built so: only loading it can tell
    err = _python(code, cache)
    assert "MLX could not load it" in err and "running uncompiled" not in err, err[-3000:]
    _sound(cache)


@needs_mlx
def test_no_gxx_on_path_runs_uncompiled_and_says_so(cache, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    code = CHILD.replace("sys.argv[1]", "'mlx'").replace("int(sys.argv[2])", "3")
    code += ("from rlx_jax.backends.mlx.runtime import compile_unavailable_reason\n"
             "assert 'g++' in compile_unavailable_reason()\n")
    err = _python(code + "print('ok')\n", cache, PATH=str(empty))
    assert err.count("running uncompiled") == 1 and "g++, which is not on PATH" in err, err
    assert not list(cache.glob("mlx/*/cpu/*"))


# ---- Core ML: packages cut short, saves cut short ----

def _package(fn):
    c = rlx_jax.jit(fn, backend="coreml", optimize="fast").lower(X).compile()
    return c.executable.package_path


def _matmul(x):
    return jnp.tanh(x @ jnp.arange(20.0, dtype=jnp.float32).reshape(4, 5)) + 1


@needs_coreml
@pytest.mark.parametrize("part", ["model.mlmodel", "weights/weight.bin"])
@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_damaged_cached_package_is_rebuilt(part, how, cache, caplog):
    path = _package(_matmul)
    target = os.path.join(path, "Data", "com.apple.CoreML", part)
    size = os.path.getsize(target)
    with open(target, "r+b") as f:
        if how == "truncated":                     # a crash mid-save, a full disk
            f.truncate(size // 2)
        else:                                      # same size, garbage inside
            f.seek(0 if part == "model.mlmodel" else 64)
            f.write(b"\xff" * min(size, 256))
    with caplog.at_level(logging.WARNING):
        _check(_matmul, "coreml", X, optimize="fast")
    assert "rebuilding it" in caplog.text and os.path.getsize(target) == size
    assert _package(_matmul) == path
    _sound(cache)


@needs_coreml
def test_save_cut_short_leaves_no_package_and_a_clear_error(cache, monkeypatch):
    import coremltools as ct
    real = ct.models.MLModel.save

    def full_disk(self, path):
        real(self, path)
        with open(os.path.join(path, "Data", "com.apple.CoreML", "model.mlmodel"), "r+b") as f:
            f.truncate(10)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ct.models.MLModel, "save", full_disk)
    with pytest.raises(CacheDirError, match="RLX_JAX_CACHE_DIR") as e:
        _package(_matmul)
    assert str(cache / "coreml") in str(e.value) and "No space left" in str(e.value)
    assert [p.name for p in (cache / "coreml").iterdir() if p.name != ".lock"] == []
    monkeypatch.setattr(ct.models.MLModel, "save", real)
    _check(_matmul, "coreml", X, optimize="fast")
    assert len(_sound(cache)[1]) == 1


@needs_coreml
def test_older_package_without_record_is_replaced(cache):
    import shutil
    path = _package(_matmul)
    os.remove(os.path.join(os.path.dirname(path), "rlx_jax-entry.json"))
    shutil.rmtree(os.path.join(path, "Data", "com.apple.CoreML", "weights"))
    _check(_matmul, "coreml", X, optimize="fast")
    _sound(cache)


# ---- processes: two at once on one empty cache; one killed mid-compile ----

@pytest.mark.parametrize("n", [3, pytest.param(10, marks=pytest.mark.slow)])
def test_two_processes_compile_the_same_programs_into_one_empty_cache(n, cache):
    procs = [_child(cache, CACHED, n) for _ in range(2)]
    for p in procs:
        _ok(p)
    libs, entries = _sound(cache)
    assert len(entries) == (n if "coreml" in CACHED else 0)


@pytest.mark.parametrize("backend", CACHED)
def test_sigkill_mid_compile_then_a_fresh_process_runs(backend, cache):
    p = _child(cache, [backend], n=3, start_new_session=True)
    for line in p.stdout:                  # kill the whole group (g++ too) inside compile #2
        if line.startswith(f"compiling {backend} 1"):
            break
    threading.Event().wait(0.4)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    for lock in list(cache.glob("*/.lock")) + list(cache.glob("*/.build.lock")):
        with open(lock) as f:                      # the dead process holds nothing
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    for tmp in cache.glob("cc??????.*"):           # g++'s temporaries, made an hour old
        os.utime(tmp, (0, 0))
    _ok(_child(cache, [backend], n=3))
    _sound(cache)
    assert not list(cache.glob("cc??????.*"))


# ---- threads: compiling one program while calling others ----

FUNCS = [lambda x: jnp.sin(x) * 2 + 1,
         lambda x: jnp.tanh(x @ x.T).sum(0),
         lambda x: jnp.exp(-x) / (1 + x * x),
         lambda x: jnp.cumsum(x, axis=-1) - x.max()]


def test_sixteen_threads_compile_and_call_at_once(backend):
    jitted = [rlx_jax.jit(f, backend=backend) for f in FUNCS]
    shape = lambda i: (2 + i % 5, 3)                     # noqa: E731
    for j in jitted[:2]:                                 # some programs compiled already
        j(np.ones(shape(0), np.float32))
    errs, checked, start = [], [], threading.Barrier(16, timeout=120)

    def work(i):
        try:
            start.wait()
            for k in range(4):
                j = (i + k) % len(FUNCS)
                x = np.linspace(-1, 1, int(np.prod(shape(i + k))), dtype=np.float32)
                x = x.reshape(shape(i + k))
                np.testing.assert_allclose(np.asarray(jitted[j](x)),
                                           np.asarray(jax.jit(FUNCS[j])(x)),
                                           rtol=1e-5, atol=1e-5)
                checked.append((i, k))
        except Exception as e:  # noqa: BLE001 - collected, reported below
            errs.append(f"thread {i}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 300
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not hung, f"threads {hung} had not finished after 300 s"
    assert not errs, "\n".join(errs[:4])
    assert sorted(checked) == [(i, k) for i in range(16) for k in range(4)]
    assert all(_free(lock) for lock in _locks())


@needs_mlx
def test_a_build_inside_a_build_does_not_wait_on_itself(cache):
    from rlx_jax.backends.mlx.kernel_cache import building_kernels
    done = []

    def nested():
        with building_kernels() as outer, building_kernels() as inner:
            done.append(outer == inner)
    t = threading.Thread(target=nested, daemon=True)
    t.start()
    t.join(30)
    assert done == [True] and all(_free(lock) for lock in _locks())
