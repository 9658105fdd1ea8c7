"""Control flow that resolves statically.

`lax.platform_dependent` (used by jnp.diag, jnp.trace, ...) stages `platform_index` followed by
a `cond` on it. rlx_jax follows JAX's CPU choice: the branch listing "cpu", else the default
branch. The index becomes a Constant, and a `cond` whose index is a Constant is translated as
the branch it picks; any other `cond` is unsupported.
"""
import numpy as np

from ...errors import UnsupportedPrimitiveError
from ...ir.ops import OpKind
from . import LIMITS, jaxpr_rule

DATA_DEPENDENT_COND = (
    "data-dependent conditionals lower in a later release (a cond on a constant index, as "
    "lax.platform_dependent stages, is inlined); compute both sides and use jnp.where, or run "
    "this part outside rlx_jax.jit")
LIMITS["cond"] = DATA_DEPENDENT_COND


@jaxpr_rule("platform_index")
def _platform_index(ctx, *, platforms, **params):
    chosen = [i for i, ps in enumerate(platforms) if ps is not None and "cpu" in ps]
    chosen = chosen or [i for i, ps in enumerate(platforms) if ps is None]
    if not chosen:
        raise UnsupportedPrimitiveError(
            f"lax.platform_dependent has no 'cpu' or default branch (platforms {platforms}); "
            f"give it a default branch")
    return ctx.b.const(np.int32(chosen[0]))


def constant_index(v):
    """The integer value of a scalar produced by a Constant node, else None."""
    node = v.node
    if node is None or node.kind is not OpKind.Constant or v.shape != ():
        return None
    return int(np.asarray(node.attrs["value"]))


@jaxpr_rule("cond")
def _cond(ctx, index, *operands, branches, **params):
    i = constant_index(index)
    if i is None:
        return ctx.unsupported(DATA_DEPENDENT_COND)
    i = min(max(i, 0), len(branches) - 1)       # lax.switch clamps the index into range
    return ctx.translate(branches[i], operands)
