"""Convolutions and windowed reductions (pools) and their JAX autodiff companions."""
import functools

import jax
import numpy as np
from jax import lax
from jax.extend import core as jcore

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
MAX_WINDOW = 64     # window elements a general reduce_window body is unrolled over


def _monoid(body):
    """The Pool fn of a body that is one add/max/min of its two operands, else None."""
    eqn = body.eqns[0] if len(body.eqns) == 1 and not body.constvars else None
    if (eqn is None or eqn.primitive.name not in _BODY_FN or len(body.invars) != 2
            or list(eqn.invars) not in (list(body.invars), list(body.invars)[::-1])
            or list(body.outvars) != list(eqn.outvars)):
        return None
    return _BODY_FN[eqn.primitive.name]


@jaxpr_rule("reduce_window")
def _reduce_window(ctx, *operands, jaxpr, consts, **p):
    """Generic reduce_window (lax.reduce_window with a traced init value, a custom body, or
    several operands). A body that is one add/max/min of its operands is a Pool combined with
    the init value; any other body is applied as XLA applies it (general_window)."""
    fn = _monoid(jaxpr) if len(operands) == 2 else None
    if fn is None:
        return general_window(ctx, operands, jaxpr, consts, **p)
    x, init = operands
    pooled = _pool(ctx, fn, x, **p)
    return ctx.b.binary("add" if fn == "sum" else fn, pooled, init)


def _valid(n, o, k, stride, lo, base, wdil):
    """Per output position along one axis: whether window element `k` lands on an operand
    element (not on padding or a base-dilation hole)."""
    q = np.arange(o) * stride + k * wdil - lo
    return (q >= 0) & (q <= (n - 1) * base) & (q % base == 0)


def general_window(ctx, operands, jaxpr, consts, *, window_dimensions, window_strides, padding,
                   base_dilation, window_dilation):
    """reduce_window with any body, as XLA computes it: per output position, the accumulators
    start at the init values and take the body of (accumulators, element) for each window
    element in row-major order, skipping those on padding or base-dilation holes. The operands
    are padded (with the dilation holes as interior padding), each window element is one
    strided slice, the body is applied elementwise (vmapped) to the whole output at once, and a
    constant mask keeps the accumulators where an element is skipped. Windows of more than
    MAX_WINDOW elements are kept on the host (fallback="host"), else refused. On rank-0
    operands XLA returns the operands as they are (the init values unused): so does this."""
    n = len(operands) // 2
    if not operands[0].shape:
        return list(operands[:n])
    count = int(np.prod(window_dimensions, dtype=np.int64))
    if count > MAX_WINDOW:
        return ctx.keep_on_host(operands, (
            f"reduce_window with a general body over windows of {count} elements (more than "
            f"{MAX_WINDOW}) is not unrolled into per-element slices"))
    shape, out = operands[0].shape, ctx.out_avals[0][0]
    config = [(int(lo), int(hi), int(d) - 1) for (lo, hi), d in zip(padding, base_dilation)]
    body = jcore.ClosedJaxpr(jaxpr, list(consts))

    lows = [c[0] for c in config]
    axes = tuple(range(len(out)))

    def fold(*args):
        xs, inits = args[:n], args[n:]
        if any(c != (0, 0, 0) for c in config):
            xs = [lax.pad(x, v, config) for x, v in zip(xs, inits)]
        step = jcore.jaxpr_as_fun(body)
        for _ in out:
            step = jax.vmap(step)
        acc = [lax.broadcast(v, out) for v in inits]
        for k in (np.ndindex(*window_dimensions) if 0 not in out else ()):
            valid = [_valid(*a) for a in zip(shape, out, k, window_strides, lows, base_dilation,
                                             window_dilation)]
            if not all(v.any() for v in valid):
                continue
            start = [i * d for i, d in zip(k, window_dilation)]
            limit = [s + (o - 1) * st + 1 for s, o, st in zip(start, out, window_strides)]
            new = step(*acc, *[lax.slice(x, start, limit, window_strides) for x in xs])
            if all(v.all() for v in valid):
                acc = list(new)
                continue
            # the mask: full length along the axes where some positions skip k, else 1
            mask = functools.reduce(np.logical_and, [
                v.reshape([-1 if a == i else 1 for a in axes]) for i, v in enumerate(valid)
                if not v.all()])
            m = lax.broadcast_in_dim(mask, out, axes)
            acc = [lax.select(m, a_new, a) for a_new, a in zip(new, acc)]
        return acc

    structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in operands]
    return ctx.translate(jax.make_jaxpr(fold)(*structs), operands)


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
