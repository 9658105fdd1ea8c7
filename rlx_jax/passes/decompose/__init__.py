"""DECOMPS[OpKind] -> decomposition(b, node, *operands) emitting primitive IR into Builder `b`.

A decomposition returns the replacement value (or tuple of values). It may emit kinds that need
expanding again; legalization runs to a fixpoint.
"""
from ...ir.interpret import rule_table
from ...ir.ops import OpKind as K

DECOMPS, decomp = rule_table("DECOMPS")


@decomp(K.Narrow)
def _narrow(b, node, x):
    a = node.attrs
    start, limit = [0] * x.ndim, list(x.shape)
    start[a["axis"]], limit[a["axis"]] = a["start"], a["start"] + a["length"]
    return b.add(K.Slice, (x,), {"start": tuple(start), "limit": tuple(limit),
                                 "strides": (1,) * x.ndim})


@decomp(K.MatMul)
def _matmul(b, node, x, y):
    """jnp.matmul semantics for rank >= 2 operands of equal rank."""
    n = x.ndim
    batch = tuple(range(n - 2))
    return b.dot_general(x, y, ((n - 1,), (n - 2,)), (batch, batch))


from . import norms, activations, autodiff  # noqa: E402,F401  (the families)
