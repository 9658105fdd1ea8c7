"""Backend protocol and registry.

A backend has a `name`, `available()` (can it run here), its claim tables (`claims`: the
SUPPORTED_OPS / NATIVE_BACKWARD_OPS sets) and `lower(graph, **options) -> Executable`, where an
Executable is a callable taking one array per graph input and returning a list of outputs.

Backends register themselves when their package is imported; the `rlx_jax.backends` package
imports every one of them, so the registry is complete as soon as this module is importable.
"""
from ..errors import BackendUnavailableError, BadArgumentError

_BACKENDS = {}
AUTO_ORDER = ("mlx", "coreml", "xla")


def register_backend(backend):
    if backend.name in _BACKENDS:
        raise KeyError(f"duplicate backend {backend.name}")
    _BACKENDS[backend.name] = backend
    return backend


def all_backends():
    """{name: backend} of every registered backend (available here or not)."""
    return dict(_BACKENDS)


def available_backends():
    """Names of the backends that can run on this machine, in `backend="auto"` order."""
    backends = all_backends()
    return [n for n in AUTO_ORDER if n in backends and backends[n].available()]


def kept_kinds(backend, native_backward=True):
    """The kinds legalization keeps for `backend`: SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS
    (= SUPPORTED_OPS_TRAINING), minus every backward kind when `native_backward` is False.
    BACKWARD_OPS (backward kinds run only by decomposition) are never kept."""
    from ..ir.ops import BACKWARD
    keep = frozenset(backend.SUPPORTED_OPS) | frozenset(backend.NATIVE_BACKWARD_OPS)
    keep -= frozenset(backend.BACKWARD_OPS) - frozenset(backend.NATIVE_BACKWARD_OPS)
    if not native_backward:
        keep -= BACKWARD
    return Claims(keep, getattr(backend, "CLAIM_PREDICATES", None))


class Claims(frozenset):
    """Kinds legalization keeps, plus `predicates` ({kind: fn(node) -> bool}, a backend's
    optional CLAIM_PREDICATES): a node of such a kind is kept only when its predicate holds
    (e.g. a kernel that handles some attribute configurations); otherwise it is decomposed."""

    def __new__(cls, kinds, predicates=None):
        self = super().__new__(cls, kinds)
        self.predicates = dict(predicates or {})
        return self


def get_backend(name):
    """The backend called `name` ("auto": the first available in AUTO_ORDER)."""
    backends = all_backends()
    if name == "auto":
        names = available_backends()
        if not names:
            raise BackendUnavailableError("no backend is available here")
        return backends[names[0]]
    if name not in backends:
        raise BadArgumentError(
            f"unknown backend {name!r}; choose one of {sorted(backends) + ['auto']}")
    b = backends[name]
    if not b.available():
        raise BackendUnavailableError(
            f"backend {name!r} is not available here: {b.unavailable_reason()}. "
            f"Available: {available_backends()}")
    return b
