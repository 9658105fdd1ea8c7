"""Control flow: `cond` -> If, `while` -> While, `scan` -> Scan, each sub-jaxpr a region.

`lax.platform_dependent` (used by jnp.diag, jnp.trace, ...) stages `platform_index` followed by
a `cond` on it. rlx_jax follows JAX's CPU choice: the branch listing "cpu", else the default
branch. The index becomes a Constant, and a `cond` whose index is a Constant is translated as
the branch it picks, in place. `fori_loop` arrives as a `scan` (static bounds) or a `while`;
a `while` with an array predicate (vmap of a while_loop) becomes JAX's lowering of it: a scalar
`any` predicate and a body that updates the lanes whose predicate holds.
"""
import jax
import numpy as np
from jax import lax

from ...errors import UnsupportedPrimitiveError
from ...ir.dims import dim
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
    if cond_jaxpr.out_avals[0].shape:            # a batched predicate (vmap of a while_loop)
        cond_jaxpr, body_jaxpr = batched_while(cond_jaxpr, body_jaxpr, cond_nconsts,
                                               body_nconsts)
        cc = operands[:cond_nconsts]
        operands = (*cc, *cc, *operands[cond_nconsts:])
        body_nconsts += cond_nconsts
    return ctx.emit(OpKind.While, operands, regions=[ctx.region(cond_jaxpr),
                                                     ctx.region(body_jaxpr)],
                    cond_nconsts=int(cond_nconsts), body_nconsts=int(body_nconsts))


@jaxpr_rule("scan")
def _scan(ctx, *operands, jaxpr, length, reverse, num_consts, num_carry, unroll=1, **params):
    return ctx.emit(OpKind.Scan, operands, regions=[ctx.region(jaxpr)], length=dim(length),
                    reverse=bool(reverse), num_consts=int(num_consts), num_carry=int(num_carry),
                    unroll=unroll if isinstance(unroll, bool) else int(unroll))


def batched_while(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """A while whose predicate is an array (vmap of a while_loop with a batched predicate), as
    JAX lowers it: loop while any lane's predicate holds; a step updates only those lanes.
    Returns (cond, body) ClosedJaxprs of a scalar-predicate while whose body takes the cond
    constants before its own."""
    def pred(cc, carry):
        return jax.core.eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *cc, *carry)[0]

    def cond(*args):
        p = pred(args[:cond_nconsts], args[cond_nconsts:])
        return lax.reduce_or(p, tuple(range(p.ndim)))

    def body(*args):
        cc, bc = args[:cond_nconsts], args[cond_nconsts:cond_nconsts + body_nconsts]
        carry = args[cond_nconsts + body_nconsts:]
        p = pred(cc, carry)
        new = jax.core.eval_jaxpr(body_jaxpr.jaxpr, body_jaxpr.consts, *bc, *carry)
        return [lax.select(lax.broadcast_in_dim(p, x.shape, tuple(range(p.ndim))), n, x)
                for n, x in zip(new, carry)]
    cond_avals = cond_jaxpr.in_avals
    body_avals = cond_avals[:cond_nconsts] + body_jaxpr.in_avals
    structs = lambda avals: [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]  # noqa: E731
    return (jax.make_jaxpr(cond)(*structs(cond_avals)),
            jax.make_jaxpr(body)(*structs(body_avals)))
