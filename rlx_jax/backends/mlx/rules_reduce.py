"""Reductions, arg-reductions (NaN first, lowest index on ties), cumulative ops, Sort (stable,
multi-operand, canonical zeros and NaNs), TopK (IEEE total order), and the contractions
DotGeneral / MatMul."""
import math

import mlx.core as mx

from ...ir.ops import OpKind as K
from .table import (FLOATS, HALF, INEXACT, SIGNED, TO_SIGNED, batched_matmul, bits, full,
                    identity, is_float, mlx_rule, out_dtype, scalar, unsupported)


def _bitwise_reduce(x, axes, fn):
    """and/or/xor over integer axes, one bit plane at a time (MLX has no bitwise reduction)."""
    if x.dtype == mx.bool_:
        return {"and": mx.all, "or": mx.any,
                "xor": lambda v, axis: mx.sum(v.astype(mx.uint32), axis=axis) % 2 == 1}[fn](
                    x, axis=axes)
    out = mx.zeros([d for i, d in enumerate(x.shape) if i not in axes], x.dtype)
    for b in range(bits(x.dtype)):
        one = scalar(1 << b if b < bits(x.dtype) - 1 or x.dtype not in SIGNED
                     else -(1 << b), x.dtype)
        plane = mx.bitwise_and(x, one) != 0
        hit = {"and": mx.all, "or": mx.any,
               "xor": lambda v, axis: mx.sum(v.astype(mx.uint32), axis=axis) % 2 == 1}[fn](
                   plane, axis=axes)
        out = mx.where(hit, mx.bitwise_or(out, one), out)
    return out


REDUCE = {"sum": mx.sum, "prod": mx.prod, "max": mx.max, "min": mx.min}


@mlx_rule(K.Reduce)
def _reduce(ctx, node, x):
    """An empty operand reduces to the identity (MLX refuses max/min over a size-0 axis)."""
    fn, axes = node.attrs["fn"], list(node.attrs["axes"])
    if not axes:
        return x
    if x.size == 0:
        dt = out_dtype(node)
        return full(node.out.shape, identity(fn, dt), dt)
    if fn in ("and", "or", "xor"):
        return _bitwise_reduce(x, axes, fn)
    if x.dtype == mx.bool_:
        fn = {"max": "or", "min": "and", "sum": "or", "prod": "and"}[fn]
        return _bitwise_reduce(x, axes, fn)
    return REDUCE[fn](x, axis=axes).astype(out_dtype(node))


def _arg(best):
    """An empty operand has an empty result (JAX refuses an arg-reduction over a size-0 axis
    itself; MLX refuses any empty operand)."""
    def rule(ctx, node, x):
        axis = node.attrs["axis"]
        if x.size == 0:
            return mx.zeros(node.out.shape, out_dtype(node))
        if x.dtype == mx.bool_:
            x = x.astype(mx.uint8)
        r = best(x, axis=axis)
        if is_float(x):                                  # JAX: the first NaN wins
            nan = mx.isnan(x)
            r = mx.where(mx.any(nan, axis=axis), mx.argmax(nan, axis=axis), r)
        return r.astype(out_dtype(node))
    return rule


mlx_rule(K.ArgMax)(_arg(mx.argmax))
mlx_rule(K.ArgMin)(_arg(mx.argmin))

CUMULATIVE = {K.Cumsum: mx.cumsum, K.CumProd: mx.cumprod, K.CumMax: mx.cummax,
              K.CumMin: mx.cummin, K.CumLogSumExp: mx.logcumsumexp}


@mlx_rule(*CUMULATIVE)
def _cumulative(ctx, node, x):
    a = node.attrs
    dt = out_dtype(node)
    if x.ndim == 0:
        return x
    if x.dtype == mx.bool_:
        x = x.astype(mx.uint8)
    r = CUMULATIVE[node.kind](accumulated(x, node.kind), axis=a["axis"], reverse=a["reverse"])
    if node.kind in (K.CumMax, K.CumMin) and is_float(x):
        r = _propagate_nan(x, r, a["axis"], a["reverse"])
    return r.astype(dt) if dt != mx.bool_ else r != 0


def accumulated(x, kind=K.Cumsum):
    """x as the running sums / products of a half-precision input accumulate it: in float32.
    MLX's cumsum / cumprod / logcumsumexp of float16 and bfloat16 accumulate in the input's
    own precision (measured, mlx 0.32.4 CPU: the cumsum of 4,096 float16 ones ends at 2,048,
    of bfloat16 ones at 256), where XLA's end at 4,096; the result is cast back by the rule."""
    if x.dtype in HALF and kind in (K.Cumsum, K.CumProd, K.CumLogSumExp):
        return x.astype(mx.float32)
    return x


def _propagate_nan(x, r, axis, reverse):
    """XLA's max/min propagate NaN: once a NaN is seen, every later prefix is NaN. MLX's
    float16/bfloat16 cummax/cummin drop it, so the NaN is put back from a running 'any NaN'."""
    seen = mx.cummax(mx.isnan(x).astype(mx.uint8), axis=axis, reverse=reverse)
    return mx.where(seen != 0, scalar(math.nan, x.dtype), r)


def total_order_key(x):
    """An integer array whose ascending order is the IEEE total order of x, the order of XLA's
    TopK: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN (a float's bits, negatives with their
    magnitude bits flipped)."""
    if x.dtype == mx.bool_:
        return x.astype(mx.uint8)
    if x.dtype not in FLOATS:
        return x
    si = TO_SIGNED[x.dtype]
    b = x.view(si)
    return mx.where(b < 0, mx.bitwise_xor(b, scalar(2 ** (bits(x.dtype) - 1) - 1, si)), b)


def order_key(x):
    """An integer array whose ascending order is JAX's sort order of x: JAX's sort comparator
    canonicalizes first, so -0 ties with +0 and every NaN ties with +NaN, last whatever its
    sign (a stable sort then keeps such ties in index order)."""
    if x.dtype not in FLOATS:
        return total_order_key(x)
    x = mx.where(mx.isnan(x), scalar(math.nan, x.dtype), mx.where(x == 0, scalar(0, x.dtype), x))
    return total_order_key(x)


def _stable_order(keys):
    """Permutation (last axis) sorting lexicographically by keys, stable."""
    idx = None
    for key in reversed(keys):
        k = key if idx is None else mx.take_along_axis(key, idx, axis=-1)
        o = mx.argsort(k, axis=-1)
        idx = o if idx is None else mx.take_along_axis(idx, o, axis=-1)
    return idx


@mlx_rule(K.Sort)
def _sort(ctx, node, *xs):
    """A stable permutation of the canonical keys, applied to the operands themselves: JAX's
    sort returns the values it was given (-0 stays -0, a NaN keeps its sign) in tie order."""
    a = node.attrs
    dim, nk = a["dimension"], a["num_keys"]
    if xs[0].ndim == 0:
        return tuple(xs) if len(xs) > 1 else xs[0]
    moved = [mx.moveaxis(x, dim, -1) for x in xs]
    idx = _stable_order([order_key(k) for k in moved[:nk]])
    out = [mx.take_along_axis(x, idx, axis=-1) for x in moved]
    out = tuple(mx.moveaxis(o, -1, dim) for o in out)
    return out if len(out) > 1 else out[0]


@mlx_rule(K.TopK)
def _top_k(ctx, node, x):
    """Largest k along the last axis in IEEE total order (+NaN first, -NaN last, +0 above -0,
    as XLA's TopK), descending; ties keep the lowest index first."""
    k = node.attrs["k"]
    desc = mx.bitwise_invert(total_order_key(x))              # ~key reverses the order exactly
    idx = mx.argsort(desc, axis=-1)[..., :k]
    return mx.take_along_axis(x, idx, axis=-1), idx.astype(out_dtype(node, 1))


# ---- contractions ----
@mlx_rule(K.DotGeneral)
def _dot_general(ctx, node, x, y):
    """[batch..., free, contract] @ [batch..., contract, free]; the free and contracting groups
    are reshaped to one axis only when they are not a single axis already (a reshape of a
    transposed view copies)."""
    (lc, rc), (lb, rb) = node.attrs["dimension_numbers"]
    lfree = [d for d in range(x.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(y.ndim) if d not in rc and d not in rb]
    bshape = [x.shape[d] for d in lb]

    def group(arr, perm, first, second):
        arr = mx.transpose(arr, perm)
        if len(first) != 1 or len(second) != 1:
            arr = arr.reshape(*bshape, math.prod(arr.shape[len(bshape):len(bshape) + len(first)]),
                              math.prod(arr.shape[len(bshape) + len(first):]))
        return arr
    xt = group(x, [*lb, *lfree, *lc], lfree, lc)
    yt = group(y, [*rb, *rc, *rfree], rc, rfree)
    dt = out_dtype(node)
    if dt in INEXACT:
        out = mx.matmul(xt.astype(dt), yt.astype(dt))
    else:
        b = math.prod(bshape)
        out = batched_matmul(xt.reshape(b, *xt.shape[-2:]), yt.reshape(b, *yt.shape[-2:]), dt)
    return out.reshape(node.out.shape)


@mlx_rule(K.MatMul)
def _matmul(ctx, node, x, y):
    dt = out_dtype(node)
    if dt in INEXACT and x.ndim >= 2 and y.ndim >= 2:
        return mx.matmul(x.astype(dt), y.astype(dt))
    if x.ndim != y.ndim or x.ndim < 2:
        unsupported(node, "integer MatMul with operands of different rank")
    batch = x.shape[:-2]
    xb = x.reshape(-1, *x.shape[-2:])
    yb = mx.broadcast_to(y, (*batch, *y.shape[-2:])).reshape(-1, *y.shape[-2:])
    return batched_matmul(xb, yb, dt).reshape(node.out.shape)
