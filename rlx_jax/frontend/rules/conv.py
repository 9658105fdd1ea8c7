"""Convolutions and windowed reductions (pools) and their JAX autodiff companions."""
import numpy as np

from ...errors import UnsupportedPrimitiveError
from ...ir.ops import OpKind as K
from . import jaxpr_rule


def _ints(xs):
    return tuple(int(x) for x in xs)


def _pads(p):
    return tuple((int(lo), int(hi)) for lo, hi in p)


@jaxpr_rule("conv_general_dilated")
def _conv(ctx, x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
          feature_group_count, batch_group_count, preferred_element_type=None, **params):
    dn = dimension_numbers
    dn = (_ints(dn.lhs_spec), _ints(dn.rhs_spec), _ints(dn.out_spec))
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    return ctx.emit(K.Conv, (x, w), window_strides=_ints(window_strides), padding=_pads(padding),
                    lhs_dilation=_ints(lhs_dilation), rhs_dilation=_ints(rhs_dilation),
                    dimension_numbers=dn, feature_group_count=int(feature_group_count),
                    batch_group_count=int(batch_group_count), preferred_element_type=pet)


def _pool(ctx, fn, x, window_dimensions, window_strides, padding, base_dilation,
          window_dilation):
    return ctx.b.add(K.Pool, (x,), dict(
        fn=fn, window_dimensions=_ints(window_dimensions), window_strides=_ints(window_strides),
        padding=_pads(padding), base_dilation=_ints(base_dilation),
        window_dilation=_ints(window_dilation)), out=ctx.out_avals[:1])


REDUCE_WINDOW = {"reduce_window_sum": "sum", "reduce_window_max": "max",
                 "reduce_window_min": "min"}
for _p, _fn in REDUCE_WINDOW.items():   # one loop over a literal table
    jaxpr_rule(_p)(lambda ctx, x, _fn=_fn, **p: _pool(ctx, _fn, x, **p))

_BODY_FN = {"add": "sum", "max": "max", "min": "min"}


@jaxpr_rule("reduce_window")
def _reduce_window(ctx, *operands, jaxpr, consts, **p):
    """Generic reduce_window: recognised when its body is one add/max/min of the two operands."""
    body = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    prims = [e.primitive.name for e in body.eqns]
    if len(operands) != 2 or len(prims) != 1 or prims[0] not in _BODY_FN:
        raise UnsupportedPrimitiveError(
            f"reduce_window with body {prims} is not supported (only a single add/max/min); "
            f"use lax.reduce_window with lax.add, lax.max or lax.min")
    fn = _BODY_FN[prims[0]]
    x, init = operands
    pooled = _pool(ctx, fn, x, **p)
    b = ctx.b
    return b.binary(prims[0] if fn != "sum" else "add", pooled, init)


@jaxpr_rule("select_and_scatter_add")
def _select_and_scatter_add(ctx, source, operand, *, select_prim, window_dimensions,
                            window_strides, padding):
    return ctx.emit(K.SelectAndScatterAdd, (source, operand), select_prim=select_prim.name,
                    window_dimensions=_ints(window_dimensions),
                    window_strides=_ints(window_strides), padding=_pads(padding))


@jaxpr_rule("select_and_gather_add")
def _select_and_gather_add(ctx, tangents, operand, *, select_prim, window_dimensions,
                           window_strides, padding, base_dilation, window_dilation):
    return ctx.emit(K.SelectAndGatherAdd, (tangents, operand), select_prim=select_prim.name,
                    window_dimensions=_ints(window_dimensions),
                    window_strides=_ints(window_strides), padding=_pads(padding),
                    base_dilation=_ints(base_dilation), window_dilation=_ints(window_dilation))
