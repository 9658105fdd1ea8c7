"""The .mlpackage cache: entries that are whole or absent, and builds that threads take turns at.

An entry is a directory `<cache>/<name>-<hash>/` holding `<name>.mlpackage` and a record of
every file of the package with its size. It is staged in `<cache>/.tmp-<pid>-*` and renamed into
place whole, so a package cut short (a crash mid-save, a full disk) never appears under its final
name. An entry is used only when its record matches the files on disk; one that does not (or that
fails to load) is set aside and rebuilt. Checking and replacing entries happens under a file lock,
so two processes never remove each other's fresh entry; staging dirs of dead processes are
removed.

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

from ... import cache
from ...errors import RlxError

MIL_LOCK = threading.RLock()
RECORD = "rlx_jax-entry.json"
_STAGING = re.compile(r"^\.(tmp|trash)-(\d+)-")
_SWEPT = set()


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


def _files(package):
    out = {}
    for d, _, names in os.walk(package):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, package)] = os.path.getsize(p)
    return out


def problem(path):
    """Why the cache entry of package `path` cannot be used (None when it is whole)."""
    try:
        with open(os.path.join(os.path.dirname(path), RECORD)) as f:
            files = json.load(f)["files"]
    except FileNotFoundError:
        return "missing" if not os.path.exists(path) else "it has no record (an older layout)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"its record is unreadable ({type(e).__name__})"
    for rel, size in files.items():
        try:
            got = os.path.getsize(os.path.join(path, rel))
        except OSError:
            return f"{rel} is missing"
        if got != size:
            return f"{rel} has {got} bytes, {size} were saved"
    return None if files else "its record lists no files"


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
                json.dump({"files": _files(staged)}, f)
            with cache.file_lock(parent):
                if problem(path) is not None:
                    _set_aside(entry)
                    os.rename(tmp, entry)
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
                    "rebuilding it.", path, why)


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
