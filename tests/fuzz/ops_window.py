"""Generators for lax.top_k (values and indices, ties and NaN included) and
lax.reduce_window sum/max/min (window sizes, strides, explicit or SAME/VALID padding, window
dilation), and sort/argsort of operands full of ties, signed zeros, infinities and NaN."""
import numpy as np

from .generate import Reject
from .registry import op

INIT = {"sum": ("lax.add", {"float": "0", "int": "0"}),
        "max": ("lax.max", {"float": "-jnp.inf", "int": "jnp.iinfo(jnp.int32).min"}),
        "min": ("lax.min", {"float": "jnp.inf", "int": "jnp.iinfo(jnp.int32).max"})}


def _tied_or_existing(ctx, dtypes, pred=lambda v: True, rank_min=1):
    """Half the time a new input drawn from a few values (ties, +-0, +-inf, NaN), else any
    operand of `dtypes` with at least `rank_min` axes."""
    if ctx.r.random() < 0.5:
        shape = ctx.shape(int(ctx.r.integers(rank_min, ctx.config.max_rank + 1)))
        if pred(_V(shape)):
            dt = ctx.dtype(dtypes)
            return ctx.new_input(shape, dt, "ties" if dt in ("float32", "float16") else "normal")
    return ctx.operand(dtypes, pred=lambda v: len(v.shape) >= rank_min and pred(v))


class _V:
    def __init__(self, shape):
        self.shape = shape


def _no_computed_nan(ctx, a):
    """NaN only where the operand is an input: a NaN made by arithmetic may carry either sign,
    which orders it first or last in top_k's total order, and its sign is not portable."""
    if a.startswith("x"):
        return

    def check(data):
        if np.any(np.isnan(data[a].astype(np.float64))):
            raise Reject("computed NaN in a total-order op")
    ctx.check(check)


@op("top_k", "sort", 1.0)
def _top_k(ctx):
    a = _tied_or_existing(ctx, ("float32", "float16", "int32"), lambda v: v.shape[-1] > 0)
    v = ctx.v(a)
    ctx.distinct(a, axis=len(v.shape) - 1)
    _no_computed_nan(ctx, a)
    k = int(ctx.r.integers(1, v.shape[-1] + 1))
    part = int(ctx.r.integers(0, 2))
    return f"lax.top_k({{0}}, {k})[{part}]", [a], v.exact or part == 1


@op("sort_ties", "sort", 0.6)
def _sort_ties(ctx):
    a = _tied_or_existing(ctx, ("float32", "float16", "int32"))
    v = ctx.v(a)
    ax = int(ctx.r.integers(0, len(v.shape)))
    ctx.distinct(a, axis=ax)
    if ctx.r.random() < 0.5:
        return f"jnp.sort({{0}}, axis={ax})", [a], v.exact
    desc = ", descending=True" if ctx.r.random() < 0.3 else ""
    return f"jnp.argsort({{0}}, axis={ax}{desc})", [a], True


def _window_dims(ctx, shape):
    """(window, strides, padding text, dilation) with every output dimension >= 0."""
    window = tuple(int(ctx.r.integers(1, 4)) for _ in shape)
    strides = tuple(int(ctx.r.integers(1, 3)) for _ in shape)
    dilation = tuple(int(ctx.r.integers(1, 3)) if ctx.r.random() < 0.3 else 1 for _ in shape)
    u = ctx.r.random()
    if u < 0.2:
        return window, strides, "'VALID'", dilation, [(0, 0)] * len(shape)
    if u < 0.35:
        pads = []
        for d, w, s, dl in zip(shape, window, strides, dilation):
            out = -(-d // s)
            total = max((out - 1) * s + (w - 1) * dl + 1 - d, 0)
            pads.append((total // 2, total - total // 2))
        return window, strides, "'SAME'", dilation, pads
    pads = [(int(ctx.r.integers(0, 3)), int(ctx.r.integers(0, 3))) for _ in shape]
    return window, strides, repr(tuple(pads)), dilation, pads


def _reduce_window(fn):
    combine, inits = INIT[fn]

    def gen(ctx):
        dtypes = ("float32", "float16", "int32")
        a = ctx.operand(dtypes, pred=lambda v: 1 <= len(v.shape) <= 4)
        v = ctx.v(a)
        window, strides, pad_text, dilation, pads = _window_dims(ctx, v.shape)
        for d, w, dl, (lo, hi) in zip(v.shape, window, dilation, pads):
            if d + lo + hi < (w - 1) * dl + 1:
                raise Reject("window larger than the padded operand")
        init = inits["int" if v.dtype == "int32" else "float"]
        dil = f", window_dilation={dilation!r}" if any(d > 1 for d in dilation) else ""
        text = (f"lax.reduce_window({{0}}, jnp.array({init}, {{0}}.dtype), {combine}, "
                f"{window!r}, {strides!r}, {pad_text}{dil})")
        return text, [a], v.exact and (fn != "sum" or v.dtype == "int32")
    return gen


for _fn in INIT:
    op(f"reduce_window_{_fn}", "reduce", 0.7)(_reduce_window(_fn))
