"""MLX's on-disk kernel cache: building into it, and keeping it sound.

MLX (CPU) builds a kernel from `<name>.cpp` with g++ into `$TMPDIR/mlx/<version>/cpu`; mlx 0.32.4
writes `tmp_<hex>.cpp` / `tmp_<hex>.so` and renames them to `<name>.cpp` / `lib<name>.so` (seen
with strace), other versions link straight into `lib<name>.so`. A build killed mid-way therefore
leaves `tmp_*` files behind (or, building in place, a library cut short), and a partial copy or a
full disk can cut a library short too. A process that finds `lib<name>.so` dlopens it without
checking it, and a short library is fatal (measured): truncated to zero bytes it fails to load
(RuntimeError "Could not load C++ shared library ...: file too short"); truncated after its
header it loads, then the process dies of SIGBUS when a page past the end is touched. So before
building, every library not yet checked in this process must be a complete ELF image (its
program and section tables, which the linker writes last, lie inside the file); others, the
`tmp_*` leftovers, and g++'s own `ccXXXXXX.*` temporaries over an hour old in the cache root
(TMPDIR during builds) are removed, and MLX rebuilds what it needs. A library that still fails
to load is removed and the call retried once (`remove_unloadable`).

Two processes building the same kernel would race (one loading the other's library while it is
written), so builds hold a file lock in the cache directory; threads of one process hold
_BUILD_LOCK, which also guards TMPDIR (process-global) while it points at the cache. The ranks
of a distributed launch build into a directory each (kernel_root).
"""
import contextlib
import os
import re
import struct
import sys
import tempfile
import threading
import time

from absl import logging

from ... import distributed
from ...cache import cache_subdir, file_lock

_BUILD_LOCK = threading.Lock()
_HOLDER = threading.local()    # .root while this thread holds the build locks
_SCANNED = {}          # kernel directory -> its mtime when last swept; kernel root -> True
_GCC_TEMP = re.compile(r"^cc[0-9A-Za-z]{6}\.[a-z]{1,3}$")
GCC_TEMP_AGE_S = 3600
_UNLOADABLE = re.compile(r"Could not load C\+\+ shared library (.+?\.so)(?::|$)", re.M)


def kernel_root():
    """<cache root>/mlx; MLX appends <version>/cpu below it. A process of a distributed group
    (rlx_jax.distributed) of more than one builds into <cache root>/mlx-rank<r>: its first call
    holds the build lock while it waits in the program's collectives for the other ranks, which
    must not be waiting on that same lock."""
    if distributed.is_initialized() and distributed.size() > 1:
        return cache_subdir(f"mlx-rank{distributed.rank()}")
    return cache_subdir("mlx")


def _elf_complete(path):
    """Whether `path` holds a whole ELF image: header, program and section tables inside it."""
    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return False
    end = "<" if head[5] == 1 else ">"
    if head[4] == 2 and len(head) == 64:      # ELF64
        phoff, shoff = struct.unpack_from(end + "QQ", head, 0x20)
        phent, phnum, shent, shnum = struct.unpack_from(end + "HHHH", head, 0x36)
    else:                                     # ELF32
        phoff, shoff = struct.unpack_from(end + "II", head, 0x1C)
        phent, phnum, shent, shnum = struct.unpack_from(end + "HHHH", head, 0x2A)
    return phoff + phent * phnum <= size and shoff + shent * shnum <= size


def is_bad_library(path):
    """True for a kernel library MLX must not load: empty, or (on Linux, where they are ELF)
    incomplete."""
    try:
        if os.path.getsize(path) == 0:
            return True
        return sys.platform.startswith("linux") and not _elf_complete(path)
    except OSError:
        return False                          # gone meanwhile: nothing to load


def _remove(path, why):
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    logging.warning("rlx_jax mlx backend: removed the kernel library %s (%s); MLX rebuilds "
                    "it.", path, why)


def _sweep_dir(cpu):
    """Removes the incomplete libraries and build leftovers in one kernel directory (called
    with the build lock held, so no build of an rlx_jax process is under way)."""
    leftovers = 0
    for entry in os.scandir(cpu):
        if entry.name.startswith("tmp_"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(entry.path)
            leftovers += 1
        elif entry.name.endswith(".so") and is_bad_library(entry.path):
            _remove(entry.path, "incomplete: cut short")
    if leftovers:
        logging.warning("rlx_jax mlx backend: removed %d leftover file(s) of kernel builds that "
                        "were cut short from %s.", leftovers, cpu)


def _sweep_gcc_temporaries(top):
    """g++ keeps its temporaries (ccXXXXXX.s, .o, ...) in $TMPDIR, i.e. the cache root while
    MLX builds, and a build killed mid-way leaves them there. Those over an hour old are
    removed (a younger one may belong to a g++ still running for a process outside the lock)."""
    old = time.time() - GCC_TEMP_AGE_S
    with contextlib.suppress(OSError):
        for entry in os.scandir(top):
            if _GCC_TEMP.match(entry.name) and entry.is_file() and \
                    entry.stat().st_mtime < old:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(entry.path)


def sweep(root):
    """Sweeps root/<version>/cpu (a directory whose entries have not changed since this
    process last swept it is skipped), and once per process g++'s leftovers above root."""
    if root not in _SCANNED:
        _SCANNED[root] = True
        _sweep_gcc_temporaries(os.path.dirname(root))
    with contextlib.suppress(FileNotFoundError):
        for version in os.scandir(root):
            cpu = os.path.join(version.path, "cpu")
            try:
                mtime = os.stat(cpu).st_mtime_ns
            except OSError:
                continue
            if _SCANNED.get(cpu) != mtime:
                _sweep_dir(cpu)
                _SCANNED[cpu] = os.stat(cpu).st_mtime_ns


def remove_unloadable(error, root):
    """Removes the cached library an MLX load error names, if it lies under `root`; True when
    one was removed (the caller then retries once)."""
    m = _UNLOADABLE.search(str(error))
    path = m and os.path.abspath(m.group(1))
    if not path or not path.startswith(os.path.abspath(root) + os.sep) or \
            not os.path.exists(path):
        return False
    _remove(path, f"MLX could not load it: {error}")
    return True


@contextlib.contextmanager
def building_kernels():
    """Points TMPDIR at the cache root while MLX builds kernels (threads and processes take
    turns); yields the kernel root. Nothing is held when setting up fails, and a build inside
    a build (same thread) goes ahead under the locks already held rather than wait on them."""
    if getattr(_HOLDER, "root", None):
        yield _HOLDER.root
        return
    root = kernel_root()
    tempfile.gettempdir()          # pin Python's own temp dir to the user's before TMPDIR moves
    with _BUILD_LOCK, file_lock(root, ".build.lock"):
        sweep(root)
        old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = os.path.dirname(root)     # MLX builds into $TMPDIR/mlx/...
        _HOLDER.root = root
        try:
            yield root
        finally:
            _HOLDER.root = None
            if old is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = old
