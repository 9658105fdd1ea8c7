"""Contractions, reductions, arg-reductions, scans and sorting as MIL."""
import numpy as np

from ....ir.dims import prod
from ....ir.ops import OpKind as K
from .legality import mil_dtype_name
from .shape import reshape
from .table import mil_rule, refuse


def _cast_to(ctx, x, dtype):
    return x if ctx.np_dtype(x) == dtype else ctx.mb.cast(x=x, dtype=mil_dtype_name(dtype))


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
    size = lambda axes: prod([shape[d] for d in axes])  # noqa: E731
    b, f, c = size(batch), size(free), size(contract)
    mat = (f, c) if lhs != flag else (c, f)
    new = ((b,) if batch else ()) + mat
    if tuple(shape[d] for d in want) != new:
        x = reshape(ctx, x, new)
    return x, flag


@mil_rule(K.DotGeneral)
def _dot_general(ctx, node, x, y):
    """lax.dot_general as transpose/reshape + one batched matmul + reshape. A bool one (an or
    of ands; MIL's matmul takes no bool) counts in float32 and tests the count for > 0."""
    (lc, rc), (lb, rb) = node.attrs["dimension_numbers"]
    xs, ys = node.inputs[0].shape, node.inputs[1].shape
    out = node.out
    logical = out.dtype == np.bool_
    work = np.dtype(np.float32) if logical else out.dtype
    x, y = _cast_to(ctx, x, work), _cast_to(ctx, y, work)
    lf = tuple(d for d in range(len(xs)) if d not in lc and d not in lb)
    rf = tuple(d for d in range(len(ys)) if d not in rc and d not in rb)
    x, tx = _operand(ctx, x, xs, tuple(lb), lf, tuple(lc), True)
    y, ty = _operand(ctx, y, ys, tuple(rb), rf, tuple(rc), False)
    z = ctx.mb.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty)
    b, m, n = prod(xs[d] for d in lb), prod(xs[d] for d in lf), prod(ys[d] for d in rf)
    if tuple(out.shape) != (((b,) if lb else ()) + (m, n)):
        z = reshape(ctx, z, out.shape)
    return ctx.mb.greater(x=z, y=ctx.scalar(0, np.float32)) if logical else z


REDUCE = {"sum": "reduce_sum", "max": "reduce_max", "min": "reduce_min", "prod": "reduce_prod"}
BOOL_REDUCE = {"and": "reduce_min", "or": "reduce_max"}


@mil_rule(K.Reduce)
def _reduce(ctx, node, x):
    fn, axes, dt = node.attrs["fn"], node.attrs["axes"], node.inputs[0].dtype
    mb = ctx.mb
    if not axes:
        return x
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
    y = getattr(mb, REDUCE[fn])(x=x, axes=axes, keep_dims=False)
    if fn in ("max", "min") and dt.kind == "f":
        y = _nan_where_any(ctx, x, y, lambda flags: mb.reduce_max(x=flags, axes=axes))
    return y


def _nan_where_any(ctx, x, y, any_of):
    """y, NaN where `any_of` (a max over int32 0 / 1 flags) finds a NaN of x: JAX's max and
    min propagate NaN, MIL's promise nothing for it."""
    mb = ctx.mb
    seen = any_of(mb.cast(x=mb.not_equal(x=x, y=x), dtype="int32"))
    return mb.select(cond=mb.greater(x=seen, y=ctx.scalar(0, np.int32)),
                     a=ctx.like(np.nan, y), b=y)


def first_best(ctx, x, axis, shape, best, nan_first=False, keep_dims=True):
    """The first index along `axis` where x equals its `best` ("reduce_max" / "reduce_min")
    with keep_dims, as a min over indices: MIL's reduce_argmax / argmin promise no tie order.
    nan_first: a NaN counts above every number (JAX's argmax and argmin)."""
    mb, n = ctx.mb, shape[axis]
    line = [1] * len(shape)
    line[axis] = n
    iota = np.arange(n, dtype=np.int32).reshape(line)
    m = getattr(mb, best)(x=x, axes=ctx.ints([axis]), keep_dims=True)
    hit = mb.equal(x=x, y=m)
    # (coremltools shapes a select as its branches' broadcast, so one branch is full-size)
    if not nan_first:
        code = mb.select(cond=hit, a=ctx.const(iota), b=mb.fill_like(ref_tensor=x, value=n))
        return mb.reduce_min(x=code, axes=ctx.ints([axis]), keep_dims=keep_dims)
    # a NaN's index i, a best number's n + i, else 2n: the min is the first NaN, else best
    code = mb.select(cond=mb.not_equal(x=x, y=x), a=ctx.const(iota), b=mb.select(
        cond=hit, a=ctx.const(iota + n), b=mb.fill_like(ref_tensor=x, value=2 * n)))
    first = mb.reduce_min(x=code, axes=ctx.ints([axis]), keep_dims=keep_dims)
    return mb.mod(x=first, y=ctx.scalar(n, np.int32))       # operands >= 0: either convention


@mil_rule(K.ArgMax, K.ArgMin)
def _arg(ctx, node, x):
    """JAX's argmax / argmin: the first index of the best value, NaN counting as best."""
    a, v = node.attrs, node.inputs[0]
    if np.dtype(a["index_dtype"]) != np.int32:
        refuse(node, f"index dtype {np.dtype(a['index_dtype']).name}", "use int32 indices")
    if v.dtype == np.bool_:
        x = ctx.mb.cast(x=x, dtype="int32")
    axis = a["axis"] % v.ndim
    best = "reduce_max" if node.kind is K.ArgMax else "reduce_min"
    return first_best(ctx, x, axis, tuple(v.shape), best, nan_first=v.dtype.kind == "f",
                      keep_dims=False)


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


# ---- sorting whatever order MIL's argsort gives equal keys ----
# MIL argsort promises sorted keys, no order among equal ones (docs/mil-semantics.md). JAX's sort
# is stable and top_k puts ties in index order, so a key is first ranked into classes (equal keys
# share one) and the order is an argsort of the unique int32 key class * n + index, which has no
# ties. That key must fit int32: an axis longer than that (about 32,000 elements for a float key)
# is one argsort of the classes, ties in an unspecified order (tests/divergences_coreml.py).
I32_MAX = 2 ** 31 - 1


def _classes(ctx, key, sub, axis, shape):
    """(o, cls, bound): o = argsort(key) ascending (NaN-free key; equal keys in any order);
    cls[p] = the number of distinct keys below key[o[p]], the key of sorted position p, doubled
    plus sub[o[p]] (0 / 1) when `sub` is given, so that sub splits a class in two; 0 <= cls <
    bound. The same for every order argsort may give equal keys."""
    mb, n = ctx.mb, shape[axis]
    o = mb.argsort(x=key, axis=axis, ascending=True)
    if n == 1:
        cls = ctx.const(np.zeros(shape, np.int32))
    else:       # a new class wherever a sorted key differs from the one before it
        from .shape import slice_
        s = mb.gather_along_axis(x=key, indices=o, axis=axis)
        start, stop, head = [0] * len(shape), list(shape), list(shape)
        start[axis], stop[axis], head[axis] = 1, n - 1, 1
        step = mb.not_equal(x=slice_(ctx, s, start, list(shape)),
                            y=slice_(ctx, s, [0] * len(shape), stop))
        runs = mb.cumsum(x=mb.cast(x=step, dtype="int32"), axis=axis)
        cls = mb.concat(values=[ctx.const(np.zeros(head, np.int32)), runs], axis=axis)
    if sub is None:
        return o, cls, n
    sub = mb.gather_along_axis(x=sub, indices=o, axis=axis)
    return o, mb.add(x=mb.mul(x=cls, y=ctx.scalar(2, np.int32)), y=sub), 2 * n


def _unsorted(ctx, cls, o, axis):
    """cls (at sorted positions) back at the positions of the elements: cls[inverse of o]."""
    return ctx.mb.scatter_along_axis(data=ctx.mb.fill_like(ref_tensor=cls, value=0), indices=o,
                                     updates=cls, axis=axis, mode="update")


def sort_exact(n, bound):
    """Whether the class * n + index key of an axis of n elements (classes below `bound`)
    fits int32, so that ties come in index order."""
    return bound * n + n <= I32_MAX


def _order(ctx, o, cls, bound, axis, n, descending):
    """The permutation sorting by class (ascending or descending), ties in index order: one
    argsort of cls * n + index (ascending) or cls * n - index (descending), keys without ties;
    beyond int32, one argsort of the classes."""
    mb = ctx.mb
    if sort_exact(n, bound):
        scaled = mb.mul(x=cls, y=ctx.scalar(n, np.int32))
        key = mb.sub(x=scaled, y=o) if descending else mb.add(x=scaled, y=o)
    else:
        key = cls
    order = mb.argsort(x=key, axis=axis, ascending=not descending)
    return mb.gather_along_axis(x=o, indices=order, axis=axis)


def _sort_key(ctx, v, x, top=False):
    """(NaN-free key, sub or None) of one operand: a float key is its value with NaN as +inf,
    NaN (and for top_k +0) splitting the class it shares (+inf, -0) to lie above it."""
    mb = ctx.mb
    if v.dtype.kind != "f":
        return (mb.cast(x=x, dtype="int32") if v.dtype == np.bool_ else x), None
    isnan = mb.not_equal(x=x, y=x)
    above = isnan
    if top:
        pos_zero = mb.logical_and(x=mb.equal(x=x, y=ctx.like(0, x)), y=mb.greater(
            x=mb.real_div(x=ctx.like(1, x), y=x), y=ctx.like(0, x)))
        above = mb.logical_or(x=isnan, y=pos_zero)
    key = mb.select(cond=isnan, a=ctx.like(np.inf, x), b=x)
    return key, mb.cast(x=above, dtype="int32")


@mil_rule(K.Sort)
def _sort(ctx, node, *xs):
    """Ascending lexicographic sort by the first num_keys operands, stable (equal keys keep
    their order): classes of the first key, each further key refining them (class * classes
    of the key + its class, ranked again), then the tie-free order. -0 and +0 are equal; NaN
    comes after +inf, NaNs equal, as in JAX. Every operand is permuted alike."""
    mb, a = ctx.mb, node.attrs
    shape = tuple(node.inputs[0].shape)
    axis = a["dimension"] % len(shape)
    n = shape[axis]
    bools = [v.dtype == np.bool_ for v in node.inputs]
    keys = [_sort_key(ctx, node.inputs[j], xs[j]) for j in range(a["num_keys"])]
    o, cls, bound = _classes(ctx, *keys[0], axis, shape)
    for key in keys[1:]:
        o_k, cls_k, bound_k = _classes(ctx, *key, axis, shape)
        if bound * bound_k > I32_MAX:
            refuse(node, f"a sort by {a['num_keys']} keys along an axis of {n} elements "
                   f"(ranking two keys at once leaves int32 above about 32,000)")
        joint = mb.add(x=mb.mul(x=_unsorted(ctx, cls, o, axis),
                                y=ctx.scalar(bound_k, np.int32)),
                       y=_unsorted(ctx, cls_k, o_k, axis))
        o, cls, bound = _classes(ctx, joint, None, axis, shape)
    idx = _order(ctx, o, cls, bound, axis, n, descending=False)
    outs = tuple(_take(ctx, x, idx, axis, b) for x, b in zip(xs, bools))
    return outs if len(outs) > 1 else outs[0]


@mil_rule(K.TopK)
def _top_k(ctx, node, x):
    """JAX's top_k: descending, ties in index order, +0 above -0, NaN above +inf (MIL cannot
    see a NaN's sign, so every NaN counts as JAX's +NaN): the classes of the value with NaN as
    +inf, split by (NaN or +0), in descending tie-free order; the first k are kept."""
    k, shape = node.attrs["k"], tuple(node.inputs[0].shape)
    axis = len(shape) - 1
    key, sub = _sort_key(ctx, node.inputs[0], x, top=True)
    o, cls, bound = _classes(ctx, key, sub, axis, shape)
    idx = _order(ctx, o, cls, bound, axis, shape[-1], descending=True)
    if k != shape[-1]:
        from .shape import slice_
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
    source = x
    if node.attrs["reverse"]:
        x = mb.reverse(x=x, axes=ctx.ints([axis]))
    n, shift = shape[axis], 1
    while shift < n:
        pad_shape = list(shape)
        pad_shape[axis] = shift
        limit = list(shape)
        limit[axis] = n - shift
        from .shape import slice_
        head = slice_(ctx, x, [0] * len(shape), limit)
        shifted = mb.concat(values=[ctx.const(np.full(pad_shape, identity(dtype), dtype)),
                                    head], axis=axis)
        x = combine(ctx, x, shifted)
        shift *= 2
    if node.attrs["reverse"]:
        x = mb.reverse(x=x, axes=ctx.ints([axis]))
    if node.kind in (K.CumMax, K.CumMin) and dtype.kind == "f":   # NaN from the first on
        x = _nan_where_any(ctx, source, x, lambda flags: mb.cumsum(
            x=flags, axis=axis, reverse=node.attrs["reverse"]))
    return x
