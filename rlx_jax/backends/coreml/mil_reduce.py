"""Contractions, reductions, arg-reductions, scans and sorting as MIL."""
import numpy as np

from ...ir.ops import OpKind as K
from .mil import mil_rule, refuse
from .mil_shape import reshape


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


@mil_rule(K.Sort)
def _sort(ctx, node, *xs):
    """Sort by the first operand (ascending); every operand is permuted alike."""
    a = node.attrs
    if a["num_keys"] != 1:
        refuse(node, f"sort with {a['num_keys']} keys (MIL argsort takes one)",
               "sort by one key")
    keys = xs[0]
    if node.inputs[0].dtype == np.bool_:
        keys = ctx.mb.cast(x=keys, dtype="int32")
    axis = a["dimension"]
    idx = ctx.mb.argsort(x=keys, axis=axis, ascending=True)
    outs = tuple(ctx.mb.gather_along_axis(x=x, indices=idx, axis=axis) for x in xs)
    return outs if len(outs) > 1 else outs[0]


@mil_rule(K.TopK)
def _top_k(ctx, node, x):
    vals, idx = ctx.mb.topk(x=x, k=node.attrs["k"], axis=-1, ascending=False)
    return vals, idx
