"""MLX's on-disk kernel cache: building into it, and keeping it sound.

MLX (CPU) builds a kernel from `<name>.cpp` with g++ into `$TMPDIR/mlx/<version>/cpu`; mlx 0.32.4
writes `tmp_<hex>.cpp` / `tmp_<hex>.so` and renames them to `<name>.cpp` / `lib<name>.so` (seen
with strace), other versions link straight into `lib<name>.so`. A build killed mid-way therefore
leaves `tmp_*` files behind (or, building in place, a library cut short), and a partial copy or a
full disk can cut a library short too. A process that finds `lib<name>.so` dlopens it without
checking it (MLX only tests that the file opens), and a damaged library is fatal (measured):
truncated to zero bytes it fails to load (RuntimeError "Could not load C++ shared library ...:
file too short"); truncated after its header it loads, then the process dies of SIGBUS when a
page past the end is touched; with 64 bytes of its code flipped (same size) it loads and the
process dies of SIGSEGV (or runs whatever the bytes now say).

MLX offers no hook between finding a library and dlopen-ing it, so rlx_jax checks before MLX
can look: MLX looks into this directory only while TMPDIR points at it, i.e. inside
`building_kernels` (the first, eagerly evaluated call of an executable), and that sweeps the
directory first. Every library there must have a record, `RECORDS/<hash of its name>.json` (a
library's name may take all 255 bytes a file name has), written when the build that made it
ended, and match the size and content hash (cache.HASH) recorded. A library without a record
(built by an older rlx_jax, or by a build that was killed or failed before the record was
written) or that does not match it is removed with its record (logged; MLX rebuilds it), and so
are records without a library, the `tmp_*` leftovers, and g++'s own `ccXXXXXX.*` temporaries
over an hour old in the cache root (TMPDIR during builds). A library that still fails to load
is removed and the call retried once (`remove_unloadable`). Each library is hashed once per
process while its inode, size and mtime stay the same (cache.Checked); one MLX has loaded
already is never read again by this process (MLX keeps its kernels in memory). Not covered:
the kernels MLX builds later under the user's own TMPDIR (runtime.py), which are MLX's cache,
not this one.

Two processes building the same kernel would race (one loading the other's library while it is
written), so builds hold a file lock in the cache directory; threads of one process hold
_BUILD_LOCK, which also guards TMPDIR (process-global) while it points at the cache. The ranks
of a distributed launch build into a directory each (kernel_root).
"""
import contextlib
import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import threading
import time

from absl import logging

from ... import cache, distributed
from ...cache import cache_subdir, file_lock

_BUILD_LOCK = threading.Lock()
_HOLDER = threading.local()    # .root while this thread holds the build locks
# kernel directory -> its mtime when last swept; kernel root -> True
_SCANNED: dict[str, int | bool] = {}
_GCC_TEMP = re.compile(r"^cc[0-9A-Za-z]{6}\.[a-z]{1,3}$")
GCC_TEMP_AGE_S = 3600
_UNLOADABLE = re.compile(r"Could not load C\+\+ shared library (.+?\.so)(?::|$)", re.M)
RECORDS = "rlx_jax-records"        # <kernel dir>/rlx_jax-records/<hash of a library's name>.json
_CHECKED = cache.Checked()         # library path -> why it cannot be used (None: it can)
NO_RECORD = "no record"


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


def record_path(path):
    """Where the record of kernel library `path` is."""
    d, name = os.path.split(path)
    return os.path.join(d, RECORDS, hashlib.sha256(name.encode()).hexdigest()[:32] + ".json")


def _read_record(path):
    """(size, digest) recorded for library `path`, or None without a readable one."""
    try:
        with open(record_path(path)) as f:
            rec = json.load(f)
        if rec.get("hash") == cache.HASH and rec.get("library") == os.path.basename(path):
            return int(rec["size"]), str(rec["digest"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def built_kernels(root):
    """How many kernel libraries are under `root` (MLX writes them to <version>/cpu below it):
    the progress of a build (progress.watch)."""
    return sum(1 for _, _, names in os.walk(root) for name in names
               if name.startswith("lib") and name.endswith(".so"))


def library_problem(path):
    """Why MLX must not load the kernel library `path` (None when it matches its record)."""
    recorded = _read_record(path)
    if recorded is None:
        return NO_RECORD
    try:
        stats = (cache.stat_key(path), cache.stat_key(record_path(path)))
    except OSError:
        return None                           # gone meanwhile: nothing to load
    if stats[0][1] != recorded[0]:
        return f"cut short or grown: {stats[0][1]} bytes, {recorded[0]} were built"
    why = _CHECKED.get(path, stats)
    if why is cache.MISSING:
        try:
            same = cache.content_hash(path) == recorded[1]
        except OSError:
            return None
        why = None if same else f"it does not match the {cache.HASH} recorded when it was built"
        _CHECKED.put(path, stats, why)
    return why


def record_library(path):
    """Writes the record of a library a build just made (atomically; a temporary file left
    behind is a `tmp_*` one, which a sweep removes). A library that is not a whole image gets
    no record, so the next sweep removes it."""
    if is_bad_library(path):
        return
    target = record_path(path)
    with contextlib.suppress(OSError):
        stat = cache.stat_key(path)
        digest = cache.content_hash(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix="tmp_")
        with os.fdopen(fd, "w") as f:
            json.dump({"library": os.path.basename(path), "hash": cache.HASH,
                       "size": stat[1], "digest": digest}, f)
        os.replace(tmp, target)


def _remove(path, why, log=True):
    for p in (path, record_path(path)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    _CHECKED.forget(path)
    if log:
        logging.warning("rlx_jax mlx backend: removed the kernel library %s (%s); MLX "
                        "rebuilds it.", path, why)


def _sweep_dir(cpu):
    """Removes the libraries that do not match their records, those without one, orphaned
    records and build leftovers in one kernel directory (called with the build lock held, so
    no build of an rlx_jax process is under way)."""
    leftovers, unrecorded, records = 0, 0, set()
    for entry in os.scandir(cpu):
        if entry.name.startswith("tmp_"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(entry.path)
            leftovers += 1
        elif entry.name.endswith(".so"):
            why = library_problem(entry.path)
            if why == NO_RECORD:
                _remove(entry.path, why, log=False)
                unrecorded += 1
            elif why is not None:
                _remove(entry.path, why)
            else:
                records.add(os.path.basename(record_path(entry.path)))
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(os.path.join(cpu, RECORDS)):     # leftovers, orphans
            if entry.name not in records:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(entry.path)
    if leftovers:
        logging.warning("rlx_jax mlx backend: removed %d leftover file(s) of kernel builds that "
                        "were cut short from %s.", leftovers, cpu)
    if unrecorded:
        logging.warning("rlx_jax mlx backend: removed %d kernel librar%s without a recorded "
                        "hash (built by an older rlx_jax, or by a build that did not finish) "
                        "from %s; MLX rebuilds them.", unrecorded,
                        "y" if unrecorded == 1 else "ies", cpu)


def _record_new(root):
    """Records every library under root/<version>/cpu that has no record yet: with the build
    locks held since the sweep, those are the ones this build made."""
    with contextlib.suppress(FileNotFoundError):
        for version in os.scandir(root):
            cpu = os.path.join(version.path, "cpu")
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for entry in os.scandir(cpu):
                    if entry.name.endswith(".so") and \
                            not os.path.exists(record_path(entry.path)):
                        record_library(entry.path)
                with contextlib.suppress(OSError):
                    _SCANNED[cpu] = os.stat(cpu).st_mtime_ns    # all of it known now


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
            _record_new(root)       # not after a failed build: unrecorded, they are swept
        finally:
            _HOLDER.root = None
            if old is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = old
