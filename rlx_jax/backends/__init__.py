"""Backends: the registry lives in base.py; `supports` is the device probe (probe.py)."""


def supports(backend, graph):
    """True when `backend` (a name or a backend) can run `graph`, natively or by decomposition."""
    from .probe import supports as probe
    return probe(backend, graph)
