"""Control flow: `cond` -> If, `while` -> While, `scan` -> Scan, each sub-jaxpr a region.

`lax.platform_dependent` (used by jnp.diag, jnp.trace, ...) stages `platform_index` followed by
a `cond` on it. rlx_jax follows JAX's CPU choice: the branch listing "cpu", else the default
branch. The index becomes a Constant, and a `cond` whose index is a Constant is translated as
the branch it picks, in place. `fori_loop` arrives as a `scan` (static bounds) or a `while`.
"""
import numpy as np

from ...errors import UnsupportedPrimitiveError
from ...ir.ops import OpKind
from . import jaxpr_rule


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
    if i is not None:
        i = min(max(i, 0), len(branches) - 1)   # lax.switch clamps the index into range
        return ctx.translate(branches[i], operands)
    return ctx.emit(OpKind.If, (index, *operands), regions=[ctx.region(b) for b in branches])


@jaxpr_rule("while")
def _while(ctx, *operands, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return ctx.emit(OpKind.While, operands, regions=[ctx.region(cond_jaxpr),
                                                     ctx.region(body_jaxpr)],
                    cond_nconsts=int(cond_nconsts), body_nconsts=int(body_nconsts))


@jaxpr_rule("scan")
def _scan(ctx, *operands, jaxpr, length, reverse, num_consts, num_carry, unroll=1, **params):
    return ctx.emit(OpKind.Scan, operands, regions=[ctx.region(jaxpr)], length=int(length),
                    reverse=bool(reverse), num_consts=int(num_consts), num_carry=int(num_carry),
                    unroll=unroll if isinstance(unroll, bool) else int(unroll))
