"""The .mlpackage cache: entries that are whole or absent, checked against a content hash before
they are used, and builds that threads take turns at.

An entry is a directory `<cache>/<name>-<hash>/` holding `<name>.mlpackage` and a record
(RECORD) of every file of the package, in sorted order, with its size and its content hash
(cache.HASH). It is staged in `<cache>/.tmp-<pid>-*` and renamed into place whole, so a package
cut short (a crash mid-save, a full disk) never appears under its final name. An entry is used
only when the files on disk are the ones its record lists, with the recorded sizes and hashes: a
damaged file of the same size (flipped bytes in weight.bin) is caught before the package is
loaded. An entry that fails the check -- or has no hashes in its record (written by an older
rlx_jax), or fails to load anyway -- is logged, renamed aside in one rename, removed and
rebuilt. The check is done once per process per version of the entry's files (cache.Checked);
what it costs next to loading the package: benchmarks/bench_cache_verify.py. Checking
and replacing entries happens under a file lock, so two processes never remove each other's
fresh entry; staging dirs of dead processes are removed.

coremltools keeps the MIL block stack and symbol tables in module globals, so building, converting
and loading MIL programs, and running the MIL reference executor, hold MIL_LOCK (an RLock: a build
may load). Core ML itself (macOS) runs packages without it.
"""
import contextlib
import json
import os
import re
import shutil
import tempfile
import threading

from absl import logging

from .... import cache
from ....errors import RlxError

MIL_LOCK = threading.RLock()
RECORD = "rlx_jax-entry.json"
FORMAT = 2                         # records with per-file content hashes
_CHECKED = cache.Checked()         # package path -> verdict of its last check in this process
_STAGING = re.compile(r"^\.(tmp|trash)-(\d+)-")
_SWEPT: set[str] = set()


def cache_dir():
    """<cache root>/coreml, created; stale staging dirs in it are removed once per process."""
    path = cache.cache_subdir("coreml")
    if path not in _SWEPT:
        _SWEPT.add(path)
        _sweep(path)
    return path


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(parent):
    """Removes `.tmp-<pid>-*` / `.trash-<pid>-*` dirs left by processes that died (killed
    mid-save); a live process's staging dir is left alone."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            m = _STAGING.match(entry.name)
            if m and entry.is_dir() and not _alive(int(m.group(2))):
                shutil.rmtree(entry.path, ignore_errors=True)


def package_files(package):
    """The relative paths ('/'-separated) of every file of `package`, sorted."""
    out = []
    for d, _, names in os.walk(package):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), package).replace(os.sep, "/"))
    return sorted(out)


def _record(package):
    """The record of a package being published: its files with their sizes and hashes."""
    files = [[rel, os.path.getsize(os.path.join(package, rel)),
              cache.content_hash(os.path.join(package, rel))] for rel in package_files(package)]
    return {"format": FORMAT, "hash": cache.HASH, "files": files}


def _recorded(record):
    """[(rel, size, digest)] of a record, or why it cannot vouch for an entry."""
    if not isinstance(record, dict) or "hash" not in record:
        return "its record holds no content hash (written by an older rlx_jax)"
    if record["hash"] != cache.HASH:
        return f"its record holds {record['hash']!r} hashes, not {cache.HASH}"
    files = record.get("files")
    if not isinstance(files, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and
            isinstance(e[1], int) and isinstance(e[2], str) for e in files):
        return "its record is malformed"
    return [tuple(e) for e in files] if files else "its record lists no files"


def _stats(path):
    """The files of package `path` and the stat_keys of its record and of them."""
    on_disk = package_files(path)
    return on_disk, (cache.stat_key(os.path.join(os.path.dirname(path), RECORD)),) + tuple(
        cache.stat_key(os.path.join(path, rel)) for rel in on_disk)


def _check(path, files):
    """Why the files of package `path` are not the recorded `files` (None when they are)."""
    try:
        on_disk, stats = _stats(path)
    except OSError as e:
        return f"it cannot be read ({type(e).__name__}: {e.strerror or e})"
    names = [rel for rel, _, _ in files]
    if on_disk != sorted(names):
        gone = sorted(set(names) - set(on_disk))
        extra = sorted(set(on_disk) - set(names))
        return f"{gone[0]} is missing" if gone else \
            f"it holds {extra[0]}, which its record does not list"
    sizes = dict(zip(on_disk, (st[1] for st in stats[1:])))
    for rel, size, _ in files:
        if sizes[rel] != size:
            return f"{rel} has {sizes[rel]} bytes, {size} were saved"
    known = _CHECKED.get(path, stats)
    if known is not cache.MISSING:
        return known
    why = None
    for rel, _, digest in files:
        try:
            got = cache.content_hash(os.path.join(path, rel))
        except OSError as e:
            why = f"{rel} cannot be read ({type(e).__name__})"
            break
        if got != digest:
            why = f"{rel} does not match the {cache.HASH} recorded when it was saved"
            break
    _CHECKED.put(path, stats, why)
    return why


def problem(path):
    """Why the cache entry of package `path` cannot be used (None when it is whole and its
    files hash to what its record says)."""
    try:
        with open(os.path.join(os.path.dirname(path), RECORD)) as f:
            record = json.load(f)
    except FileNotFoundError:
        return "missing" if not os.path.exists(path) else "it has no record (an older layout)"
    except (OSError, ValueError) as e:
        return f"its record is unreadable ({type(e).__name__})"
    files = _recorded(record)
    return files if isinstance(files, str) else _check(path, files)


def _set_aside(entry):
    """Renames a bad entry out of the way (one rename, so readers never see half of it) and
    removes it."""
    if os.path.lexists(entry):
        trash = tempfile.mkdtemp(dir=os.path.dirname(entry), prefix=f".trash-{os.getpid()}-")
        os.rename(entry, os.path.join(trash, "entry"))
        shutil.rmtree(trash, ignore_errors=True)


def is_entry(path):
    """Whether `path` is laid out as a cache entry: `.../<name>-<hash>/<name>.mlpackage`
    (only then may its directory be replaced as a whole)."""
    name = os.path.basename(path)[:-len(".mlpackage")]
    return path.endswith(".mlpackage") and \
        os.path.basename(os.path.dirname(path)).startswith(name + "-")


def publish(model, path):
    """Saves `model` as the cache entry of `path`; an entry another process published whole
    first is kept."""
    if not is_entry(path):
        raise ValueError(f"{path} is not a cache entry path (see package.entry_path)")
    entry = os.path.dirname(path)
    parent = os.path.dirname(entry)
    try:
        tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.getpid()}-")
        try:
            staged = os.path.join(tmp, os.path.basename(path))
            model.save(staged)
            with open(os.path.join(tmp, RECORD), "w") as f:
                json.dump(_record(staged), f)
            with cache.file_lock(parent):
                if problem(path) is not None:
                    _set_aside(entry)
                    os.rename(tmp, entry)
                    _CHECKED.forget(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise cache.CacheDirError(
            f"backend 'coreml': could not save {os.path.basename(path)} in the cache "
            f"directory {parent} ({type(e).__name__}: {e}); free space there or set "
            f"{cache.ENV} to a writable directory") from None
    return path


def _rebuilding(path, why):
    logging.warning("rlx_jax coreml backend: the cached package %s cannot be used (%s); "
                    "setting it aside and rebuilding it.", path, why)


def _identity(path):
    """Which published entry `path` is in (its record's inode and mtime), None without one."""
    try:
        st = os.stat(os.path.join(os.path.dirname(path), RECORD))
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def discard(path, why, seen):
    """Sets the cache entry of `path` aside, unless it is no longer the one judged bad (`seen`,
    from _identity): another process may have replaced it meanwhile."""
    _rebuilding(path, why)
    _CHECKED.forget(path)
    entry = os.path.dirname(path)
    with cache.file_lock(os.path.dirname(entry)):
        if _identity(path) == seen:
            _set_aside(entry)


def cached(path, build, load):
    """load() of the cache entry of `path`, built first when absent or not whole (publish
    replaces such an entry); one that fails to load anyway is discarded, rebuilt and loaded
    once more."""
    why = problem(path)
    if why is not None:
        if why != "missing":
            _rebuilding(path, why)
        build()
    seen = _identity(path)
    try:
        return load()
    except RlxError:
        raise
    except Exception as e:  # noqa: BLE001 - an unloadable package: rebuild it once
        discard(path, f"loading it failed: {type(e).__name__}: {e}", seen)
        build()
        return load()
