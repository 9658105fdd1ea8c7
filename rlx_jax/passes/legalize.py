"""Legalization: keep what the backend claims, expand the rest through DECOMPS to a fixpoint.

Whatever is still unclaimed afterwards is collected and raised once as a LegalizationError that
names every node, its text and its user source line. There is no silent fallback.
"""
from ..errors import LegalizationError
from ..ir.graph import Builder, Node, Value
from ..ir.ops import OpKind
from .dce import dce
from .decompose import DECOMPS

BOUNDARY = frozenset({OpKind.Input, OpKind.Constant, OpKind.Param})
MAX_ROUNDS = 32


def _copy_node(b, node, inputs):
    new = Node(node.kind, inputs, node.attrs, node.src)
    new.outputs = tuple(Value(o.shape, o.dtype, new, i) for i, o in enumerate(node.outputs))
    b.graph.nodes.append(new)
    return new.outputs


def _kept(node, keep, predicates):
    pred = predicates.get(node.kind)
    return node.kind in keep and (pred is None or bool(pred(node)))


def legalize_once(graph, keep, decomps=DECOMPS, predicates=None):
    """One rewrite round. Returns (new graph, number of nodes expanded, unclaimed nodes).
    `predicates` ({kind: fn(node) -> bool}) narrows the claim on a kind to some nodes."""
    b = Builder(graph.like())
    env, expanded, bad = {}, 0, []
    predicates = predicates or {}
    for n in graph.nodes:
        ins = [env[v.id] for v in n.inputs]
        kept = _kept(n, keep, predicates)
        if kept or n.kind in BOUNDARY or n.kind not in decomps:
            if not kept and n.kind not in BOUNDARY:
                bad.append(n)
            outs = _copy_node(b, n, ins)
            if n.kind is OpKind.Input:
                b.graph.inputs.append(outs[0])
        else:
            b.src = n.src
            res = decomps[n.kind](b, n, *ins)
            outs = res if isinstance(res, (tuple, list)) else (res,)
            for o, new in zip(n.outputs, outs):
                if (o.shape, o.dtype) != (new.shape, new.dtype):
                    raise LegalizationError(
                        f"decomposition of {n.kind.name} produced {new.type_str()} for "
                        f"{o.type_str()} in `{n.text()}`")
            expanded += 1
        for o, new in zip(n.outputs, outs):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in graph.outputs]
    return b.graph, expanded, bad


def legalize(graph, keep, backend="?", decomps=DECOMPS):
    """Returns an equivalent graph containing only kinds in `keep` (plus Input/Constant).
    `keep` may carry `predicates` (backends.base.Claims): see legalize_once."""
    predicates = getattr(keep, "predicates", None)
    keep = frozenset(keep)
    for _ in range(MAX_ROUNDS):
        graph, expanded, bad = legalize_once(graph, keep, decomps, predicates)
        if not expanded:
            break
    if bad:
        lines = [f"  {n.kind.name}: `{n.text()}`" + (f"  at {n.src}" if n.src else "")
                 for n in bad]
        raise LegalizationError(
            f"backend '{backend}' cannot run {len(bad)} node(s): it does not lower these kinds "
            f"and no decomposition exists:\n" + "\n".join(lines)
            + "\nUse another backend (rlx_jax.available_backends()), or rewrite these ops.")
    return dce(graph).verify()
