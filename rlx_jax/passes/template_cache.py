"""An on-disk cache of the graphs traced from pattern references (passes/patterns.py): the
templates and the exact re-traces at a candidate's shapes; and, in an area of its own, of the
output types shape inference gave a node signature (ir/shapes.py).

Tracing a reference with `jax.make_jaxpr` and translating it takes tens of milliseconds, and a
transformer's train step reads about ninety of them: seconds on the first recognition of every
process. Inferring a signature's types (`jax.eval_shape` of its kind's reference semantics)
takes a millisecond or two, and a program has a few hundred signatures. Each graph is pickled
under `<cache root>/patterns/<digest>/`, each signature's types under `types/<digest>/` (the
cache root of rlx_jax/cache.py), where the digest covers the versions of jax, jaxlib, numpy
and the libraries the references trace (flax, optax, equinox) and every source file of rlx_jax
itself (the frontend decides what a template is, ir/reference.py what a kind's types are), so
any change of those starts a directory of its own. An entry is keyed by the reference's name
(unique: patterns.Reference refuses a second one), the input types (shapes and dtypes: each
float dtype variant of a template, patterns.VARIANTS, is an entry of its own) and the parameters
(types: by the node signature); it is written atomically (a temporary file, then a rename) as MAGIC,
the content hash (cache.HASH) of the pickle, then the pickle. An entry is unpickled only when
its pickle hashes to the stored hash: one that does not -- damaged bytes that would still
unpickle into a wrong template, a file cut short, one in another layout -- is logged, removed
and traced (inferred) again; one that cannot be read is traced again. A graph that cannot be
pickled is simply not cached. `RLX_JAX_PATTERN_CACHE=0` turns both areas off.
"""
import contextlib
import functools
import hashlib
import importlib.metadata
import os
import pickle
import tempfile

from absl import logging

from .. import cache

ENV = "RLX_JAX_PATTERN_CACHE"
LIBRARIES = ("jax", "jaxlib", "numpy", "flax", "optax", "equinox")
MISSING = object()
MAGIC = b"rlx_jax pattern graph, " + cache.HASH.encode() + b"\n"
_DIGEST_SIZE = hashlib.new(cache.HASH).digest_size


def enabled():
    return os.environ.get(ENV, "1") != "0"


@functools.lru_cache(maxsize=1)
def digest():
    """The hash of the library versions and rlx_jax's sources the cached graphs depend on."""
    h = hashlib.sha256()
    for lib in LIBRARIES:
        try:
            h.update(f"{lib}={importlib.metadata.version(lib)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{lib}=-;".encode())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for d, subdirs, files in sorted(os.walk(root)):
        subdirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()[:24]


AREAS = {"patterns": ("pattern graph", "tracing the reference again"),
         "types": ("entry of inferred types", "inferring them again")}


def path(key, area="patterns"):
    """The file of `key`'s entry in `area` (one of AREAS)."""
    return _path(repr(key), area)


def _path(text, area):
    name = hashlib.sha256(text.encode()).hexdigest()[:32] + ".pkl"
    return os.path.join(cache.cache_subdir(os.path.join(area, digest())), name)


def _damaged(target, why, area="patterns"):
    what, again = AREAS[area]
    logging.warning("rlx_jax: the cached %s %s is damaged (%s); removed it, %s.", what, target,
                    why, again)
    with contextlib.suppress(OSError):
        os.remove(target)


def checked_payload(target, data, area="patterns"):
    """The pickle stored in the entry `data` of file `target`, None when it fails its check
    (logged, and the file removed)."""
    if not data.startswith(MAGIC):
        _damaged(target, "it does not start as an entry does", area)
        return None
    stored = data[len(MAGIC):len(MAGIC) + _DIGEST_SIZE]
    payload = data[len(MAGIC) + _DIGEST_SIZE:]
    if hashlib.new(cache.HASH, payload).digest() != stored:
        _damaged(target, f"its {cache.HASH} differs from the one stored with it", area)
        return None
    return payload


def load(key, area="patterns"):
    """The cached graph (or, in area "types", types) of `key`, or MISSING."""
    if not enabled():
        return MISSING
    text = repr(key)
    try:
        target = _path(text, area)
        with open(target, "rb") as f:
            data = f.read()
    except (OSError, cache.CacheDirError):
        return MISSING
    payload = checked_payload(target, data, area)
    if payload is None:
        return MISSING
    try:
        stored_key, graph = pickle.loads(payload)
    except (EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError,
            TypeError):
        return MISSING
    return graph if stored_key == text else MISSING


def store(key, graph, area="patterns"):
    """Caches `graph` for `key`; a graph that cannot be pickled is not cached. Only traced
    graphs are stored: a reference that refused to trace (a library missing, or blocked in this
    process) is asked again next time."""
    if not enabled():
        return
    text = repr(key)
    try:
        target = _path(text, area)
        data = pickle.dumps((text, graph), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.new(cache.HASH, data).digest() + data)
        os.replace(tmp, target)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError,
            cache.CacheDirError):
        return
