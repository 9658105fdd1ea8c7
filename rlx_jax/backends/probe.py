"""The device probe: can a backend run a graph at all (possibly through decompositions)?

A graph is supported when every kind is in SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS ∪ BACKWARD_OPS,
or decomposes (through DECOMPS, to a fixpoint) into such kinds. BACKWARD_OPS count here only:
legalization never keeps them, it decomposes them.
"""
from ..errors import LegalizationError
from ..passes.legalize import BOUNDARY, legalize


def probe_kinds(backend):
    """Every kind the probe accepts for `backend` (a backend object)."""
    return (frozenset(backend.SUPPORTED_OPS) | frozenset(backend.NATIVE_BACKWARD_OPS)
            | frozenset(backend.BACKWARD_OPS))


def supports(backend, graph):
    """True when `backend` (a backend object; `rlx_jax.backends.supports` also takes a name) can
    run `graph`, natively or by decomposition."""
    kinds = probe_kinds(backend)
    if graph.kinds() <= kinds | BOUNDARY:
        return True
    try:
        legalize(graph, kinds, backend=backend.name)
    except LegalizationError:
        return False
    return True
