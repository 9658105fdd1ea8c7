"""Backends. Each backend package registers itself (base.register_backend) when imported, and
this package imports them all: `xla` (the reference), `mlx` and `coreml`. base.py holds the
registry (all_backends, available_backends, get_backend) and what legalization keeps
(kept_kinds); placement/probe.py is the device probe behind `supports`; `claims(name)` prints a backend's
claim tables."""
from . import xla  # noqa: F401
try:
    from . import mlx  # noqa: F401
except ImportError:
    pass
try:
    from . import coreml  # noqa: F401
except ImportError:
    pass
from .base import all_backends


def supports(backend, graph):
    """What of `graph` `backend` (a name or a backend) runs on the device: a probe.Support,
    true when every op does (natively or by decomposition), with `.host` listing the ops that
    would run on the host and why."""
    if isinstance(backend, str):
        backend = all_backends()[backend]
    from ..placement.probe import supports as probe
    return probe(backend, graph)


def claims(backend):
    """The claim tables of `backend` (a name or a backend), seed-style: a base.ClaimTables
    whose str() lists each table's kinds (print(rlx_jax.backends.claims("coreml")))."""
    from .base import ClaimTables
    if isinstance(backend, str):
        backend = all_backends()[backend]
    return ClaimTables.of(backend)
