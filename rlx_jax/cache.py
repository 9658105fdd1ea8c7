"""The package's cache root, shared by the backends (MLX kernels, Core ML packages).

The root is `$RLX_JAX_CACHE_DIR`, else `~/.cache/rlx_jax`. A root that cannot be created or
written (a path under a regular file, a read-only file system) does not stop programs: the caches
move to one temporary directory for the rest of the process (removed at exit), and that is logged
once, naming the directory, the reason and RLX_JAX_CACHE_DIR. Only when even that fails is a
CacheDirError raised.

`file_lock` is the cross-process lock the backends hold while they check and publish entries:
an flock, so a process killed while holding it releases it.

Every entry is checked against a content hash recorded when it was written (`content_hash`,
HASH) before it is used: a Core ML package (coreml/package/cache.py), an MLX kernel library
(kernel_cache.py), a traced pattern graph (template_cache.py). `Checked` remembers, per process,
what a file's hash was found to be, so an unchanged file (same inode, size and mtime) is hashed
once per process.
"""
import atexit
import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Hashable, Iterator
from time import monotonic, sleep
from typing import IO, Any

from absl import logging

from .errors import RlxError

ENV = "RLX_JAX_CACHE_DIR"
# sha256, not blake2b: OpenSSL runs it on the SHA instructions of x86 (SHA-NI) and Apple silicon
# (ARMv8 SHA2), about twice blake2b's speed there (benchmarks/bench_cache_verify.py prints both).
HASH = "sha256"
_CHUNK = 1 << 20


class CacheDirError(RlxError):
    """No usable cache directory: neither the configured one nor a temporary one."""


_LOCK = threading.Lock()
_WRITABLE: set[str] = set()     # directories already probed in this process
_FALLBACK: dict[str, str] = {}        # unusable configured root -> the temporary root used instead
LOCK_TIMEOUT_S = 300


def configured_root() -> str:
    return os.environ.get(ENV) or os.path.join(os.path.expanduser("~"), ".cache", "rlx_jax")


def _unusable(path: str) -> str | None:
    """Why `path` cannot hold cache entries (None when it can): created, then probed by
    writing a file, since permission bits say nothing for root or read-only mounts."""
    if path in _WRITABLE and os.path.isdir(path):
        return None
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    _WRITABLE.add(path)
    return None


def _fallback(root: str, why: str) -> str:
    """The temporary root standing in for an unusable `root` (made and logged once)."""
    if root not in _FALLBACK:
        try:
            tmp = tempfile.mkdtemp(prefix="rlx_jax-cache-")
        except OSError as e:
            raise CacheDirError(
                f"rlx_jax cannot use the cache directory {root} ({why}) nor a temporary one "
                f"({e}); set {ENV} to a writable directory") from None
        atexit.register(shutil.rmtree, tmp, True)
        logging.warning("rlx_jax: cache directory %s is not usable (%s); caching in %s for "
                        "this process instead. Set %s to a writable directory to keep compiled "
                        "programs between runs.", root, why, tmp, ENV)
        _FALLBACK[root] = tmp
    return _FALLBACK[root]


def cache_root() -> str:
    """The directory caches live under: the configured root, or its temporary stand-in."""
    root = os.path.abspath(configured_root())
    with _LOCK:
        why = _unusable(root)
        return root if why is None else _fallback(root, why)


def cache_subdir(name: str) -> str:
    """<cache root>/<name>, created."""
    path = os.path.join(cache_root(), name)
    with _LOCK:
        why = _unusable(path)
    if why is not None:
        raise CacheDirError(f"rlx_jax cannot write its cache directory {path} ({why}); set "
                            f"{ENV} to a writable directory")
    return path


def _acquire(f: IO[Any], timeout: float) -> bool:
    """flock(LOCK_EX) on `f`, giving up after `timeout` seconds; whether it is held."""
    deadline = monotonic() + timeout
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if monotonic() > deadline:
                return False
            sleep(0.02)


@contextlib.contextmanager
def file_lock(directory: str, name: str = ".lock",
              timeout: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
    """Holds an exclusive flock on `directory`/`name` (other processes wait; the threads of one
    process need a lock of their own besides). A holder that does not let go within `timeout`
    seconds (a hung build) is logged and then ignored, so no caller waits forever; yields
    whether the lock is held."""
    with open(os.path.join(directory, name), "a") as f:
        held = _acquire(f, timeout)
        if not held:
            logging.warning("rlx_jax: %s stayed locked for %.0f s; going on without the lock.",
                            f.name, timeout)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(f, fcntl.LOCK_UN)


def content_hash(path: str, algorithm: str = HASH) -> str:
    """The hex digest of the file at `path` (a large one read in 1 MiB chunks)."""
    h = hashlib.new(algorithm)
    with open(path, "rb", buffering=0) as f:
        if os.fstat(f.fileno()).st_size <= _CHUNK:
            h.update(f.read())
            return h.hexdigest()
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                return h.hexdigest()
            h.update(view[:n])


def stat_key(path: str) -> tuple[int, int, int]:
    """What identifies one version of a file without reading it: (inode, size, mtime)."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


MISSING = object()       # Checked.get: nothing remembered for these stat_keys


class Checked:
    """A process's memory of checks: key -> (the stat_keys the check saw, its verdict). A
    verdict is reused only while every file it covered has the same stat_key (a rewrite
    changes the mtime; a replaced entry changes the inode)."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, stats: Any) -> Any:
        with self._lock:
            got = self._seen.get(key)
        return got[1] if got is not None and got[0] == stats else MISSING

    def put(self, key: Hashable, stats: Any, verdict: Any) -> None:
        with self._lock:
            self._seen[key] = (stats, verdict)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._seen.pop(key, None)
