"""Legalization: keep what the backend claims, expand the rest through DECOMPS to a fixpoint.

A node whose decomposition does not apply to it (decompose.PARTIAL) counts as unclaimed.
Whatever is still unclaimed afterwards is collected and raised once as a LegalizationError that
names every node, its text and its user source line; with `fallback="host"` it stays in the
graph instead, and `unclaimed` names it for the partitioner (placement/partition.py), which runs
it on the host. Nothing is dropped silently. A backend that does not claim every kind on
typed PRNG keys (ir.ops.KEY_KINDS) gets the keys as their uint32 data first
(decompose/keys.py: physicalize).
"""
from ..errors import IRTypeError, LegalizationError, RlxError
from ..ir.interpret import rule_failure
from ..ir.ops import KEY_KINDS, OpKind
from ..ir.rewrite import dce, rewrite
from .decompose import DECOMPS
from .decompose.keys import physicalize

BOUNDARY = frozenset({OpKind.Input, OpKind.Constant})
MAX_ROUNDS = 32


def _kept(node, keep, predicates):
    pred = predicates.get(node.kind)
    return node.kind in keep and (pred is None or bool(pred(node)))


def legalize_once(graph, keep, decomps=DECOMPS, predicates=None, backend="?"):
    """One rewrite round. Returns (new graph, number of nodes expanded, unclaimed nodes).
    `predicates` ({kind: fn(node) -> bool}) narrows the claim on a kind to some nodes. An
    exception inside a decomposition is a bug: a LoweringError naming the node, its line and
    the decomposition (interpret.rule_failure)."""
    bad = []
    predicates = predicates or {}

    def expand(b, n, ins):
        if _kept(n, keep, predicates) or n.kind in BOUNDARY:
            return None
        rule = decomps.get(n.kind)
        try:
            res = rule(b, n, *ins) if rule is not None else None
        except RlxError as e:
            rule_failure(backend, n, rule, e)
            raise
        except Exception as e:  # noqa: BLE001 - a bug in the decomposition: it surfaces
            raise rule_failure(backend, n, rule, e) from e
        if res is None:              # no decomposition, or one that does not apply to n
            bad.append(n)
        return res
    try:
        new, expanded = rewrite(graph, expand, "decomposition")
    except IRTypeError as e:
        raise LegalizationError(str(e)) from None
    return new, expanded, bad


def unclaimed(graph, keep) -> dict[int, str]:
    """{id(node): reason} of the top-level nodes that hold a kind `keep` does not claim (in
    themselves or in their regions), after legalization with fallback="host"."""
    predicates = getattr(keep, "predicates", None) or {}
    out = {}
    for n in graph.nodes:
        bad = [m for m in n.walk() if m.kind not in BOUNDARY
               and not _kept(m, keep, predicates)]
        if bad:
            kinds = sorted({_kind_name(m) for m in bad})
            inside = "" if bad == [n] else " (inside its regions)"
            out[id(n)] = f"no lowering for {', '.join(kinds)}{inside} and no decomposition"
    return out


def _kind_name(n):
    """The kind, or for a HostPrimitive the JAX primitive it keeps and why (`the JAX primitive
    `zeta` (this special function has no RLX kind yet)`)."""
    if n.kind is OpKind.HostPrimitive:
        why = getattr(n.attrs.get("params"), "why", None) or "no RLX kind yet"
        return f"the JAX primitive `{n.attrs['primitive']}` ({why})"
    return n.kind.name


def legalize(graph, keep, backend="?", decomps=DECOMPS, fallback="error"):
    """Returns an equivalent graph containing only kinds in `keep` (plus Input/Constant); with
    fallback="host", unclaimed nodes are kept (see `unclaimed`) instead of refused.
    `keep` may carry `predicates` (backends.base.Claims): see legalize_once."""
    predicates = getattr(keep, "predicates", None)
    keep = frozenset(keep)
    if not KEY_KINDS <= keep:        # the backend cannot hold typed keys: their uint32 data
        graph = physicalize(graph)
    for _ in range(MAX_ROUNDS):
        graph, expanded, bad = legalize_once(graph, keep, decomps, predicates, backend)
        if not expanded:
            break
    if bad and fallback != "host":
        lines = [f"  {n.kind.name}: `{n.text()}`" + (f"  at {n.src}" if n.src else "")
                 for n in bad]
        raise LegalizationError(
            f"backend '{backend}' cannot run {len(bad)} node(s): it does not lower these kinds "
            f"and no decomposition applies to them:\n" + "\n".join(lines)
            + "\nUse another backend (rlx_jax.available_backends()), or rewrite these ops.")
    return dce(graph).verify()
