"""Indexing: dynamic slices, gather, scatter.

Every scatter primitive is read by what its update_jaxpr computes (`combiner`), as JAX's XLA
lowering does: lax.scatter_apply binds `scatter` with update_jaxpr = func(operand element), which
rlx_jax decomposes (`_scatter_apply`); an update computation of another form is refused."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.dims import dim
from ...ir.ops import OpKind as K
from . import jaxpr_rule


# GatherScatterMode -> the string lax accepts: out-of-bounds gathers fill, scatters drop
_GATHER_MODE = {"CLIP": "clip", "FILL_OR_DROP": "fill", "PROMISE_IN_BOUNDS": "promise_in_bounds",
                "ONE_HOT": "one_hot"}
_SCATTER_MODE = dict(_GATHER_MODE, FILL_OR_DROP="drop")


def _mode(mode, table):
    return table[lax.GatherScatterMode.from_any(mode).name]


def _dn(dn):
    """Dimension numbers with plain int tuples (AD leaves numpy ints in them)."""
    return type(dn)(*[tuple(int(i) for i in f) for f in dn])


jaxpr_rule("dynamic_slice")(lambda ctx, x, *starts, slice_sizes: ctx.emit(
    K.DynamicSlice, (x, *starts), sizes=tuple(int(s) for s in slice_sizes)))
jaxpr_rule("dynamic_update_slice")(lambda ctx, x, upd, *starts: ctx.emit(
    K.DynamicUpdateSlice, (x, upd, *starts)))


@jaxpr_rule("gather")
def _gather(ctx, x, idx, *, dimension_numbers, slice_sizes, indices_are_sorted, unique_indices,
            mode, fill_value):
    return ctx.emit(K.Gather, (x, idx), dimension_numbers=_dn(dimension_numbers),
                    slice_sizes=tuple(dim(s) for s in slice_sizes),
                    mode=_mode(mode, _GATHER_MODE),
                    fill_value=fill_value, indices_are_sorted=bool(indices_are_sorted),
                    unique_indices=bool(unique_indices))


def _scatter(fn):
    def rule(ctx, x, idx, upd, *, dimension_numbers, indices_are_sorted, unique_indices, mode,
             **params):
        kind = K.ScatterAdd if fn == "add" else K.Scatter
        extra = {} if fn == "add" else {"fn": fn}
        return ctx.emit(kind, (x, idx, upd), dimension_numbers=_dn(dimension_numbers),
                        mode=_mode(mode, _SCATTER_MODE),
                        indices_are_sorted=bool(indices_are_sorted),
                        unique_indices=bool(unique_indices), **extra)
    return rule


# what an update computation's one binary eqn `prim a b` (a: operand element, b: update) does
_BINARY = {"add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "min": "min",
           "max": "max"}
_COMMUTATIVE = frozenset(("add", "mul", "min", "max"))


def combiner(update_jaxpr):
    """What a scatter computes at each updated element from the operand's element a and the
    update b, read off its `update_jaxpr` (JAX lowers every scatter primitive with that jaxpr
    as XLA's update computation; None is XLA's replace, `lambda a, b: b`): "replace", "add",
    "sub", "mul", "min", "max", "apply" (a function of a alone: lax.scatter_apply), or None
    (anything else)."""
    if update_jaxpr is None:
        return "replace"
    if update_jaxpr.effects or len(update_jaxpr.invars) != 2 or len(update_jaxpr.outvars) != 1:
        return None
    a, b = update_jaxpr.invars
    out, = update_jaxpr.outvars
    if out is b:
        return "replace"
    eqns = update_jaxpr.eqns
    if len(eqns) == 1 and eqns[0].outvars == [out] and all(  # e.g. mul's out_dtype=None
            v is None for v in eqns[0].params.values()):
        fn = _BINARY.get(eqns[0].primitive.name)
        ins = list(eqns[0].invars)
        if fn is not None and (ins == [a, b] or (ins == [b, a] and fn in _COMMUTATIVE)):
            return fn
    if all(b not in e.invars for e in eqns):
        return "apply"
    return None


def _scatter_apply(ctx, x, idx, upd, update_jaxpr, update_consts, dn, mode, sorted_, unique):
    """lax.scatter_apply: every element that k update elements hit becomes func applied k times
    (XLA applies the update computation once per update element). k is a scatter-add of ones
    with the same indices, dimension numbers and mode; func (the update jaxpr, scalar) is
    vmapped over the operand and applied where k > i, for i < max(k)."""
    dtype, zero = x.dtype, np.zeros((), x.dtype)

    def func(y):
        f = jax.vmap(lambda a: jax.core.eval_jaxpr(update_jaxpr, update_consts, a, zero)[0])
        return f(y.reshape(-1)).reshape(y.shape)

    windows = [s for d, s in enumerate(upd.shape) if d not in dn.update_window_dims]
    once = unique or int(np.prod(windows)) <= 1

    def apply(y, i):
        k = lax.scatter_add(jnp.zeros(y.shape, np.int32), i, jnp.ones(upd.shape, np.int32), dn,
                            indices_are_sorted=sorted_, unique_indices=unique, mode=mode)
        if once:
            return jnp.where(k > 0, func(y), y)
        step = lambda c: (c[0] + 1, jnp.where(k > c[0], func(c[1]), c[1]))  # noqa: E731
        top = jnp.max(k, initial=0)
        return lax.while_loop(lambda c: c[0] < top, step, (np.int32(0), y))[1]
    closed = jax.make_jaxpr(apply)(jax.ShapeDtypeStruct(x.shape, dtype),
                                   jax.ShapeDtypeStruct(idx.shape, idx.dtype))
    return ctx.translate(closed, [x, idx])


def _scatter_rule(name):
    def rule(ctx, x, idx, upd, *, update_jaxpr=None, update_consts=(), dimension_numbers,
             indices_are_sorted, unique_indices, mode):
        fn = combiner(update_jaxpr)
        params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                      unique_indices=unique_indices, mode=mode)
        if fn == "apply":
            return _scatter_apply(ctx, x, idx, upd, update_jaxpr, update_consts,
                                  _dn(dimension_numbers), mode, bool(indices_are_sorted),
                                  bool(unique_indices))
        if fn == "sub":
            return _scatter("add")(ctx, x, idx, ctx.b.unary("neg", upd), **params)
        if fn is None:
            return ctx.unsupported(
                f"`{name}` with an update computation rlx_jax does not represent "
                f"({' '.join(str(update_jaxpr).split())}); rlx_jax runs scatters that replace, "
                f"add, subtract, multiply, take the min or max (x.at[i].set/add/subtract/"
                f"multiply/min/max) or apply a function (lax.scatter_apply): rewrite it with "
                f"those, or run it outside rlx_jax.jit")
        return _scatter(fn)(ctx, x, idx, upd, **params)
    return rule


for _p in ("scatter", "scatter-add", "scatter-sub", "scatter-mul", "scatter-min", "scatter-max"):
    jaxpr_rule(_p)(_scatter_rule(_p))
