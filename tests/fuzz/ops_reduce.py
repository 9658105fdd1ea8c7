"""Reduction generators (sum/prod/mean/max/min/argmax/argmin/any/all with axes and keepdims),
cumulative ops (cumsum/cumprod/cummax, reversed) and sort/argsort."""
from .generate import Reject
from .program import FLOATS
from .registry import op

# name: (function, operand dtypes, result exact when the operand is, discrete in the operand)
REDUCE = {
    "sum": ("jnp.sum", ("float32", "float16", "int32", "bool"), False, False),
    "prod": ("jnp.prod", ("float32", "float16", "int32"), False, False),
    "mean": ("jnp.mean", ("float32", "float16", "int32"), False, False),
    "max": ("jnp.max", ("float32", "float16", "int32", "bool"), True, False),
    "min": ("jnp.min", ("float32", "float16", "int32"), True, False),
    "any": ("jnp.any", ("bool",), True, False),
    "all": ("jnp.all", ("bool",), True, False),
    "argmax": ("jnp.argmax", ("float32", "float16", "int32"), True, True),
    "argmin": ("jnp.argmin", ("float32", "float16", "int32"), True, True),
}


def _axes(ctx, rank, single):
    """axis text: None, an int (negative sometimes) or a tuple of distinct axes."""
    if rank == 0 or (not single and ctx.r.random() < 0.2):
        return "None", None
    if single or ctx.r.random() < 0.5:
        ax = int(ctx.r.integers(0, rank))
        return str(ax - rank if ctx.r.random() < 0.3 else ax), ax
    k = int(ctx.r.integers(1, rank + 1))
    axes = tuple(sorted(int(a) for a in ctx.r.choice(rank, k, replace=False)))
    return repr(axes), axes


def _reduce(fn, dtypes, keeps_exact, discrete):
    def gen(ctx):
        a = ctx.operand(dtypes)
        v = ctx.v(a)
        text, ax = _axes(ctx, len(v.shape), single=discrete)
        if discrete:
            ctx.distinct(a, axis=ax)
        keep = ", keepdims=True" if ctx.r.random() < 0.3 else ""
        exact = (keeps_exact or v.dtype not in FLOATS) and v.exact
        if text == "None" and not keep and ctx.r.random() < 0.3:
            return f"{{0}}.{fn.split('.')[-1]}()", [a], exact
        return f"{fn}({{0}}, axis={text}{keep})", [a], exact
    return gen


for _name, (_fn, _d, _k, _disc) in REDUCE.items():
    op(_name, "reduce", 1.0)(_reduce(_fn, _d, _k, _disc))


def _axis(ctx, a):
    rank = len(ctx.v(a).shape)
    if rank == 0:
        raise Reject("scalar")
    return int(ctx.r.integers(0, rank))


CUM = {"cumsum": "jnp.cumsum({0}, axis=%d)", "cumprod": "jnp.cumprod({0}, axis=%d)",
       "cumsum_rev": "lax.cumsum({0}, axis=%d, reverse=True)",
       "cummax": "lax.cummax({0}, axis=%d)"}


def _cum(template, exact_kind):
    def gen(ctx):
        a = ctx.operand(("float32", "float16", "int32"))
        v = ctx.v(a)
        return template % _axis(ctx, a), [a], v.exact and (exact_kind or v.dtype == "int32")
    return gen


for _name, _t in CUM.items():
    op(_name, "cumulative", 0.8)(_cum(_t, _name == "cummax"))


@op("sort", "sort", 1.0)
def _sort(ctx):
    a = ctx.operand(("float32", "float16", "int32", "bool"))
    if ctx.r.random() < 0.3 and len(ctx.v(a).shape) >= 1:
        return "jnp.sort({0})", [a], ctx.v(a).exact
    return "jnp.sort({0}, axis=%d)" % _axis(ctx, a), [a], ctx.v(a).exact


@op("argsort", "sort", 1.0)
def _argsort(ctx):
    a = ctx.operand(("float32", "float16", "int32"))
    ax = _axis(ctx, a)
    ctx.distinct(a, axis=ax)
    desc = ", descending=True" if ctx.r.random() < 0.3 else ""
    return f"jnp.argsort({{0}}, axis={ax}{desc})", [a], True
