"""Reductions, arg-reductions, cumulative ops, sorting."""
import numpy as np

from ...ir.ops import OpKind as K
from . import jaxpr_rule

for _fn in ("sum", "max", "min", "prod", "and", "or", "xor"):
    jaxpr_rule(f"reduce_{_fn}")(lambda ctx, x, *, axes, _fn=_fn, **params: ctx.emit(
        K.Reduce, (x,), fn=_fn, axes=tuple(int(a) for a in axes)))

jaxpr_rule("argmax")(lambda ctx, x, *, axes, index_dtype: ctx.emit(
    K.ArgMax, (x,), axis=int(axes[0]), index_dtype=np.dtype(index_dtype)))
jaxpr_rule("argmin")(lambda ctx, x, *, axes, index_dtype: ctx.emit(
    K.ArgMin, (x,), axis=int(axes[0]), index_dtype=np.dtype(index_dtype)))

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
