"""Indexing: dynamic slices, gather, scatter."""
from jax import lax

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
                    slice_sizes=tuple(int(s) for s in slice_sizes),
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


for _p, _fn in {"scatter": "replace", "scatter-add": "add", "scatter-mul": "mul",
                "scatter-min": "min", "scatter-max": "max"}.items():
    jaxpr_rule(_p)(_scatter(_fn))


@jaxpr_rule("scatter-sub")
def _scatter_sub(ctx, x, idx, upd, **params):
    neg = ctx.b.unary("neg", upd)
    return _scatter("add")(ctx, x, idx, neg, **params)
