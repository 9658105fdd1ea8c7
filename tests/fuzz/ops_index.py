"""Indexing generators: integer/slice indexing, take, take_along_axis, gather through x[idx],
dynamic_slice and .at[] scatters (.set with distinct indices, since XLA leaves the winner of
duplicate .set indices unspecified; .add/.max/.min with duplicates). Index arrays are new int32
inputs drawn in range, negative indices included."""
from .generate import Reject
from .program import FLOATS
from .registry import op


def _nonempty(ctx, min_rank=1, dtypes=("float32", "float16", "int32", "bool")):
    a = ctx.operand(dtypes, pred=lambda v: len(v.shape) >= min_rank and v.shape[0] > 0)
    return a, ctx.v(a)


def _index_input(ctx, n, rank=None, unique=False):
    shape = ctx.shape(int(ctx.r.integers(0, 3)) if rank is None else rank)
    if unique:
        shape = (int(ctx.r.integers(0, n + 1)),)
    return ctx.new_input(shape, "int32", f"{'unique' if unique else 'index'}:{n}")


@op("int_index", "index", 1.5)
def _int_index(ctx):
    a, v = _nonempty(ctx)
    parts = []
    for d in v.shape[:int(ctx.r.integers(1, len(v.shape) + 1))]:
        if d > 0 and ctx.r.random() < 0.6:
            parts.append(str(int(ctx.r.integers(-d, d))))
        else:
            parts.append(ctx.choice((":", "1:", "::2", "None")))
    if ctx.r.random() < 0.2 and v.shape[-1] > 0:
        k = int(ctx.r.integers(-v.shape[-1], v.shape[-1]))
        return "{0}[..., %d]" % k, [a], v.exact
    return "{0}[%s]" % ", ".join(parts), [a], v.exact


@op("take", "index", 1.0)
def _take(ctx):
    a = ctx.operand(pred=lambda v: len(v.shape) >= 1 and 0 not in v.shape)
    v = ctx.v(a)
    axis = int(ctx.r.integers(0, len(v.shape)))
    i = _index_input(ctx, v.shape[axis])
    return f"jnp.take({{0}}, {{1}}, axis={axis})", [a, i], v.exact


@op("take_along_axis", "index", 0.7)
def _take_along_axis(ctx):
    a = ctx.operand(pred=lambda v: len(v.shape) >= 1 and 0 not in v.shape)
    v = ctx.v(a)
    axis = int(ctx.r.integers(0, len(v.shape)))
    shape = list(v.shape)
    shape[axis] = int(ctx.r.integers(0, 4))
    i = ctx.new_input(tuple(shape), "int32", f"index:{v.shape[axis]}")
    return f"jnp.take_along_axis({{0}}, {{1}}, axis={axis})", [a, i], v.exact


@op("gather", "index", 1.5)
def _gather(ctx):
    a, v = _nonempty(ctx)
    u = ctx.r.random()
    if u < 0.5 or len(v.shape) < 2:
        return "{0}[{1}]", [a, _index_input(ctx, v.shape[0])], v.exact
    if v.shape[1] == 0:
        raise Reject("empty second axis")
    if u < 0.75:
        return "{0}[:, {1}]", [a, _index_input(ctx, v.shape[1])], v.exact
    i = _index_input(ctx, v.shape[0])
    j = ctx.new_input(ctx.v(i).shape, "int32", f"index:{v.shape[1]}")
    return "{0}[{1}, {2}]", [a, i, j], v.exact


@op("dynamic_slice", "index", 0.7)
def _dynamic_slice(ctx):
    a, v = _nonempty(ctx)
    sizes = tuple(int(ctx.r.integers(0, d + 1)) for d in v.shape)
    starts = tuple(int(ctx.r.integers(-1, d + 2)) for d in v.shape)   # clamped by XLA
    return f"lax.dynamic_slice({{0}}, {starts!r}, {sizes!r})", [a], v.exact


SCATTER = {"scatter_set": "set", "scatter_add": "add", "scatter_max": "max",
           "scatter_min": "min"}


def _scatter(method):
    def gen(ctx):
        a, v = _nonempty(ctx, dtypes=("float32", "float16", "int32"))
        i = _index_input(ctx, v.shape[0], unique=method == "set")
        if ctx.r.random() < 0.25:                     # a static slice, scalar update
            s = "0.5" if v.dtype in FLOATS else "3"
            return f"{{0}}.at[1:].{method}({s})", [a], v.exact and method != "add"
        upd = ctx.v(i).shape + v.shape[1:]
        if ctx.r.random() < 0.2:
            upd = upd[1:] if len(upd) else upd         # broadcast updates
        u = ctx.new_input(upd, v.dtype)
        exact = v.exact and (method != "add" or v.dtype == "int32")
        return f"{{0}}.at[{{1}}].{method}({{2}})", [a, i, u], exact
    return gen


for _name, _m in SCATTER.items():
    op(_name, "scatter", 0.8)(_scatter(_m))
