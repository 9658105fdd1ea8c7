"""Contractions, reductions, arg-reductions, scans and sorting as MIL."""
import numpy as np

from ...ir.ops import OpKind as K
from .mil_shape import reshape
from .table import mil_rule, refuse


def _cast_to(ctx, x, dtype):
    from .mil_elementwise import MIL_DTYPE
    return x if ctx.np_dtype(x) == dtype else ctx.mb.cast(x=x, dtype=MIL_DTYPE[dtype.name])


mil_rule(K.MatMul)(lambda ctx, node, x, y: ctx.mb.matmul(x=x, y=y))


def _operand(ctx, x, shape, batch, free, contract, lhs):
    """Puts an operand in [B, M, K] (lhs) / [B, K, N] (rhs) order, using matmul's transpose
    flag instead of a transpose op where that suffices. Returns (var, transposed?)."""
    want = batch + (free + contract if lhs else contract + free)
    alt = batch + (contract + free if lhs else free + contract)
    ident = tuple(range(len(shape)))
    flag = False
    if tuple(want) != ident and tuple(alt) == ident:
        want, flag = alt, True
    elif tuple(want) != ident:
        x = ctx.mb.transpose(x=x, perm=ctx.ints(want))
    size = lambda dims: int(np.prod([shape[d] for d in dims], dtype=np.int64))  # noqa: E731
    b, f, c = size(batch), size(free), size(contract)
    mat = (f, c) if lhs != flag else (c, f)
    new = ((b,) if batch else ()) + mat
    if tuple(shape[d] for d in want) != new:
        x = reshape(ctx, x, new)
    return x, flag


@mil_rule(K.DotGeneral)
def _dot_general(ctx, node, x, y):
    """lax.dot_general as transpose/reshape + one batched matmul + reshape."""
    (lc, rc), (lb, rb) = node.attrs["dimension_numbers"]
    xs, ys = node.inputs[0].shape, node.inputs[1].shape
    out = node.out
    x, y = _cast_to(ctx, x, out.dtype), _cast_to(ctx, y, out.dtype)
    lf = tuple(d for d in range(len(xs)) if d not in lc and d not in lb)
    rf = tuple(d for d in range(len(ys)) if d not in rc and d not in rb)
    x, tx = _operand(ctx, x, xs, tuple(lb), lf, tuple(lc), True)
    y, ty = _operand(ctx, y, ys, tuple(rb), rf, tuple(rc), False)
    z = ctx.mb.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty)
    b = int(np.prod([xs[d] for d in lb], dtype=np.int64))
    m = int(np.prod([xs[d] for d in lf], dtype=np.int64))
    n = int(np.prod([ys[d] for d in rf], dtype=np.int64))
    if tuple(out.shape) != (((b,) if lb else ()) + (m, n)):
        z = reshape(ctx, z, out.shape)
    return z


REDUCE = {"sum": "reduce_sum", "max": "reduce_max", "min": "reduce_min", "prod": "reduce_prod"}
BOOL_REDUCE = {"and": "reduce_min", "or": "reduce_max"}


@mil_rule(K.Reduce)
def _reduce(ctx, node, x):
    fn, axes, dt = node.attrs["fn"], node.attrs["axes"], node.inputs[0].dtype
    mb = ctx.mb
    if not axes:
        return mb.identity(x=x)
    axes = ctx.ints(axes)
    if dt == np.bool_:
        xi = mb.cast(x=x, dtype="int32")
        if fn in BOOL_REDUCE:
            return mb.cast(x=getattr(mb, BOOL_REDUCE[fn])(x=xi, axes=axes), dtype="bool")
        if fn == "xor":
            s = mb.reduce_sum(x=xi, axes=axes)
            return mb.not_equal(x=mb.mod(x=s, y=ctx.scalar(2, np.int32)),
                                y=ctx.scalar(0, np.int32))
        fn = {"sum": "max", "max": "max", "min": "min", "prod": "min"}.get(fn, fn)
        return mb.cast(x=getattr(mb, REDUCE[fn])(x=xi, axes=axes), dtype="bool")
    if fn not in REDUCE:
        refuse(node, f"bitwise reduction {fn} on {dt.name}")
    return getattr(mb, REDUCE[fn])(x=x, axes=axes, keep_dims=False)


@mil_rule(K.ArgMax, K.ArgMin)
def _arg(ctx, node, x):
    a = node.attrs
    if np.dtype(a["index_dtype"]) != np.int32:
        refuse(node, f"index dtype {np.dtype(a['index_dtype']).name}", "use int32 indices")
    if node.inputs[0].dtype == np.bool_:
        x = ctx.mb.cast(x=x, dtype="int32")
    op = ctx.mb.reduce_argmax if node.kind is K.ArgMax else ctx.mb.reduce_argmin
    return op(x=x, axis=a["axis"], keep_dims=False)


@mil_rule(K.Cumsum)
def _cumsum(ctx, node, x):
    if node.inputs[0].dtype == np.bool_:
        refuse(node, "cumsum of bool", "cast to int32 first")
    return ctx.mb.cumsum(x=x, axis=node.attrs["axis"], reverse=node.attrs["reverse"])


def _take(ctx, x, idx, axis, is_bool):
    if is_bool:
        x = ctx.mb.cast(x=x, dtype="int32")
    y = ctx.mb.gather_along_axis(x=x, indices=idx, axis=axis)
    return ctx.mb.cast(x=y, dtype="bool") if is_bool else y


@mil_rule(K.Sort)
def _sort(ctx, node, *xs):
    """Ascending lexicographic sort by the first num_keys operands: stable argsorts from the
    least significant key to the most significant. A float key sorts as (value with NaN as
    +inf, is-NaN), so NaN comes after +inf as in JAX. Every operand is permuted alike."""
    mb, a = ctx.mb, node.attrs
    axis = a["dimension"]
    bools = [v.dtype == np.bool_ for v in node.inputs]
    passes = []                   # (key var, bool?) most significant first
    for j in range(a["num_keys"]):
        if node.inputs[j].dtype.kind == "f":
            isnan = mb.cast(x=mb.not_equal(x=xs[j], y=xs[j]), dtype="int32")
            passes += [(nan_last(ctx, xs[j]), False), (isnan, False)]
        else:
            passes.append((xs[j], bools[j]))
    idx = None
    for key, is_bool in reversed(passes):
        if idx is not None:
            key = _take(ctx, key, idx, axis, is_bool)
        if is_bool:
            key = mb.cast(x=key, dtype="int32")
        order = mb.argsort(x=key, axis=axis, ascending=True)
        idx = order if idx is None else mb.gather_along_axis(x=idx, indices=order, axis=axis)
    outs = tuple(_take(ctx, x, idx, axis, b) for x, b in zip(xs, bools))
    return outs if len(outs) > 1 else outs[0]


def nan_last(ctx, x):
    """NaN -> +inf, so MIL orders NaN after every number, as JAX does."""
    mb = ctx.mb
    return mb.select(cond=mb.not_equal(x=x, y=x), a=ctx.like(np.inf, x), b=x)


@mil_rule(K.TopK)
def _top_k(ctx, node, x):
    """JAX's top_k: descending, ties in index order, +0 above -0, NaN above +inf (MIL cannot
    see a NaN's sign, so every NaN counts as JAX's +NaN). MIL topk promises no tie order, so
    this is two stable descending argsorts: by a tie key (2 NaN, 1 +0, 0 else), then by the
    value with NaN as +inf; the first k indices are kept."""
    mb, k, axis = ctx.mb, node.attrs["k"], node.inputs[0].ndim - 1
    if node.inputs[0].dtype.kind != "f":
        key = mb.cast(x=x, dtype="int32") if node.inputs[0].dtype == np.bool_ else x
        idx = mb.argsort(x=key, axis=-1, ascending=False)
    else:
        isnan = mb.cast(x=mb.not_equal(x=x, y=x), dtype="int32")
        pos_zero = mb.logical_and(x=mb.equal(x=x, y=ctx.like(0, x)), y=mb.greater(
            x=mb.real_div(x=ctx.like(1, x), y=x), y=ctx.like(0, x)))
        tie = mb.add(x=mb.mul(x=isnan, y=ctx.scalar(2, np.int32)),
                     y=mb.cast(x=pos_zero, dtype="int32"))
        first = mb.argsort(x=tie, axis=-1, ascending=False)
        key = mb.gather_along_axis(x=nan_last(ctx, x), indices=first, axis=-1)
        order = mb.argsort(x=key, axis=-1, ascending=False)
        idx = mb.gather_along_axis(x=first, indices=order, axis=-1)
    shape = node.inputs[0].shape
    if k != shape[-1]:
        from .mil_shape import slice_
        idx = slice_(ctx, idx, [0] * len(shape), list(shape[:-1]) + [k])
    return _take(ctx, x, idx, axis, node.inputs[0].dtype == np.bool_), idx


def _logaddexp(ctx, a, b):
    """m + log(exp(a - m) + exp(b - m)) with m = max(a, b) when finite, else 0: an infinite m
    would make inf - inf = NaN where logaddexp(inf, x) is inf and logaddexp(-inf, -inf) -inf."""
    mb = ctx.mb
    m = mb.maximum(x=a, y=b)
    finite = mb.equal(x=mb.sub(x=m, y=m), y=ctx.like(0, m))
    safe = mb.select(cond=finite, a=m, b=ctx.like(0, m))
    s = mb.add(x=mb.exp(x=mb.sub(x=a, y=safe)), y=mb.exp(x=mb.sub(x=b, y=safe)))
    return mb.add(x=safe, y=mb.log(x=s, epsilon=ctx.like(0, s)))


SCANS = {  # kind -> (combine, identity for a dtype)
    K.CumProd: (lambda ctx, a, b: ctx.mb.mul(x=a, y=b), lambda dt: 1),
    K.CumMax: (lambda ctx, a, b: ctx.mb.maximum(x=a, y=b),
               lambda dt: -np.inf if dt.kind == "f" else np.iinfo(dt).min),
    K.CumMin: (lambda ctx, a, b: ctx.mb.minimum(x=a, y=b),
               lambda dt: np.inf if dt.kind == "f" else np.iinfo(dt).max),
    K.CumLogSumExp: (_logaddexp, lambda dt: -np.inf),
}


@mil_rule(*SCANS)
def _scan(ctx, node, x):
    """Inclusive scan in log2(n) steps (Hillis-Steele): y = combine(y, y shifted by 2^k)."""
    combine, identity = SCANS[node.kind]
    axis, shape = node.attrs["axis"] % node.inputs[0].ndim, node.inputs[0].shape
    dtype = np.dtype(node.inputs[0].dtype)
    if dtype.kind not in "fi" or (node.kind is K.CumLogSumExp and dtype.kind != "f"):
        refuse(node, f"{node.kind.name} of {dtype.name}")
    mb = ctx.mb
    if node.attrs["reverse"]:
        x = mb.reverse(x=x, axes=ctx.ints([axis]))
    n, shift = shape[axis], 1
    while shift < n:
        pad_shape = list(shape)
        pad_shape[axis] = shift
        limit = list(shape)
        limit[axis] = n - shift
        from .mil_shape import slice_
        head = slice_(ctx, x, [0] * len(shape), limit)
        shifted = mb.concat(values=[ctx.const(np.full(pad_shape, identity(dtype), dtype)),
                                    head], axis=axis)
        x = combine(ctx, x, shifted)
        shift *= 2
    if node.attrs["reverse"]:
        x = mb.reverse(x=x, axes=ctx.ints([axis]))
    return x
