"""Reductions, arg-reductions, cumulative ops, sorting."""
import numpy as np

from ...ir.ops import OpKind as K
from . import jaxpr_rule

REDUCE = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "prod",
          "reduce_and": "and", "reduce_or": "or", "reduce_xor": "xor"}
for _p, _fn in REDUCE.items():   # one loop over a literal table
    jaxpr_rule(_p)(lambda ctx, x, *, axes, _fn=_fn, **params: ctx.emit(
        K.Reduce, (x,), fn=_fn, axes=tuple(int(a) for a in axes)))

jaxpr_rule("argmax")(lambda ctx, x, *, axes, index_dtype: ctx.emit(
    K.ArgMax, (x,), axis=int(axes[0]), index_dtype=np.dtype(index_dtype)))
jaxpr_rule("argmin")(lambda ctx, x, *, axes, index_dtype: ctx.emit(
    K.ArgMin, (x,), axis=int(axes[0]), index_dtype=np.dtype(index_dtype)))

_REDUCE_BODY = {"add": "sum", "mul": "prod", "max": "max", "min": "min", "and": "and",
                "or": "or", "xor": "xor"}


@jaxpr_rule("reduce")
def _reduce(ctx, *operands, computation=None, jaxpr, dimensions, **params):
    """Generic lax.reduce: recognised when it has one operand and its body is one binary op of
    the accumulator and the element; the result is init ⊕ reduce(x). Any other body (several
    operands, a computed body) is kept as it is, on the host, with fallback="host"
    (EqnContext.keep_on_host), else refused by name."""
    body = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    eqn = body.eqns[0] if len(body.eqns) == 1 else None
    if (len(operands) != 2 or eqn is None or eqn.primitive.name not in _REDUCE_BODY
            or list(eqn.invars) != list(body.invars) or list(body.outvars) != eqn.outvars):
        return ctx.keep_on_host(operands, (
            "lax.reduce with this body (not one operand combined by a single "
            "add/mul/max/min/and/or/xor) has no RLX kind; jnp reductions have"))
    x, init = operands
    b = ctx.b
    red = b.reduce(_REDUCE_BODY[eqn.primitive.name], x, tuple(int(d) for d in dimensions))
    return ctx.emit(K.Binary, (red, init), fn=eqn.primitive.name)


CUMULATIVE = {"cumsum": K.Cumsum, "cumprod": K.CumProd, "cummax": K.CumMax,
              "cummin": K.CumMin, "cumlogsumexp": K.CumLogSumExp}
for _p, _k in CUMULATIVE.items():
    jaxpr_rule(_p)(lambda ctx, x, *, axis, reverse, _k=_k: ctx.emit(
        _k, (x,), axis=int(axis), reverse=bool(reverse)))


@jaxpr_rule("sort")
def _sort(ctx, *xs, dimension, is_stable, num_keys):
    return ctx.emit(K.Sort, xs, dimension=int(dimension), is_stable=bool(is_stable),
                    num_keys=int(num_keys))


@jaxpr_rule("top_k")
def _top_k(ctx, x, *, k, axis=-1, **params):
    b = ctx.b
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        return ctx.emit(K.TopK, (x,), k=int(k))
    perm = [i for i in range(x.ndim) if i != axis] + [axis]
    inv = list(np.argsort(perm))
    vals, idx = b.add(K.TopK, (b.transpose(x, perm),), {"k": int(k)})
    return [b.transpose(vals, inv), b.transpose(idx, inv)]
