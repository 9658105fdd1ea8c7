"""DECOMPS[OpKind] -> decomposition(b, node, *operands) emitting primitive IR into Builder `b`.

A decomposition returns the replacement value (or tuple of values). It may emit kinds that need
expanding again; legalization runs to a fixpoint. A decomposition that applies to some nodes of
its kind only (PARTIAL names which) returns None for the others: they stay unclaimed, and
legalization refuses them as it does a kind with no decomposition.
"""
import jax.numpy as jnp

from ...tables import rule_table
from ...ir.ops import OpKind as K

DECOMPS, decomp = rule_table("DECOMPS")
# kind -> the nodes its decomposition applies to, where that is not every node of the kind
PARTIAL = {
    K.ReducePrecision: "decomposed where the target format has at least the operand dtype's "
                       "exponent and mantissa bits (it is the identity there); one that rounds "
                       "is refused",
}


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


@decomp(K.ReducePrecision)
def _reduce_precision(b, node, x):
    """The identity where the target format holds every value of x's dtype (e.g. float32 to 8
    exponent and 23 mantissa bits, which remat's saving policies insert); None otherwise."""
    info = jnp.finfo(x.dtype)
    if node.attrs["exponent_bits"] >= info.nexp and node.attrs["mantissa_bits"] >= info.nmant:
        return x
    return None


from . import norms, activations, autodiff, keys, optim, quant  # noqa: E402,F401  (the families)
from . import rnn  # noqa: E402,F401  (the recurrent kinds)
from . import xent  # noqa: E402,F401  (dense-label cross-entropy)
from . import sgd  # noqa: E402,F401  (optax sgd with momentum)
