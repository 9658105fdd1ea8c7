"""MIL reference executor, strict overrides: the MIL ops whose spec (coremltools'
`converters/mil/mil/ops/defs/iOS15/*.py` docstrings) leaves a choice open, evaluated with the
least convenient reading, so that a lowering relying on more than the spec promises fails
here instead of on a Mac. docs/mil-semantics.md is the table of what each lowering relies on.

- ties in argsort / topk / reduce_argmax / reduce_argmin come in a seeded random order;
- maximum / minimum / relu / clip / reduce_max / reduce_min drop a NaN operand (IEEE
  754-2008 maxNum; max_pool, in executor/ops.py, too, and pads with 0: the spec names no pad
  value);
- round sends an exact .5 to floor or ceil at random (the spec only says 0.5 -> 0);
- sign of NaN is +1 or -1, sign of -0.0 is +0.0; mod picks the C or the Python convention at
  random where the operands' signs differ; integer floor_div / mod by zero give garbage;
- cast to an integer rounds a fraction up or down at random and gives garbage for NaN or out of
  range; cast to bool of anything but 0 / 1 is random;
- scatter_nd(mode="update") with repeated indices keeps a random one of the updates, and its
  max / min drop a NaN;
- pow(NaN, 0), pow(1, NaN) and pow(-1, +-inf) are NaN (IEEE 754 and C99 say 1);
- int32 add / sub / mul overflow wraps unless `strict(int_overflow="poison")`.

Randomness is deterministic: a generator seeded by (the strict seed, the operands' bytes), so a
program gives the same result on every call and in every test order; `strict(seed=...)` (or
RLX_JAX_MIL_SEED) picks another arbitrary order.
"""
import contextlib
import os
import zlib

import numpy as np

from ....errors import LoweringError
from .ops import override

STRICT = {"seed": int(os.environ.get("RLX_JAX_MIL_SEED", "0")), "int_overflow": "wrap"}


@contextlib.contextmanager
def strict(**settings):
    """Temporarily sets the strict executor's `seed` (the arbitrary orders it picks) or
    `int_overflow` ("wrap": int32 add/sub/mul wrap modulo 2**32, as JAX's do; "poison": an
    overflowing element is garbage, which the MIL spec allows)."""
    unknown = set(settings) - set(STRICT)
    if unknown:
        raise ValueError(f"unknown strict executor settings {sorted(unknown)}")
    old = dict(STRICT)
    STRICT.update(settings)
    try:
        yield
    finally:
        STRICT.clear()
        STRICT.update(old)


def rng(*arrays):
    """The generator of one evaluation: seeded by the strict seed and the operands."""
    h = 0
    for a in arrays:
        a = np.ascontiguousarray(a)
        h = zlib.crc32(a.tobytes(), zlib.crc32(repr((a.shape, a.dtype.str)).encode(), h))
    return np.random.default_rng([STRICT["seed"], h])


def _garbage(r, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return r.random(shape) < 0.5
    info = np.iinfo(dtype)
    return r.integers(info.min, int(info.max) + 1, size=shape, dtype=np.int64).astype(dtype)


def _axis(axis, ndim, default=-1):
    a = int(default if axis is None else np.asarray(axis).reshape(()))
    return a + ndim if a < 0 else a


# ---- orders: ties in any order ----
def _order(x, axis, ascending):
    """argsort with ties (and NaNs: the spec gives them no place) in a random order."""
    x = np.asarray(x)
    r = rng(x, np.asarray([axis, ascending]))
    key = x.astype(np.float64)
    if not ascending:
        key = -key
    nan = np.isnan(key)
    key = np.where(nan, np.where(r.random(x.shape) < 0.5, -np.inf, np.inf), key)
    return np.lexsort((r.random(x.shape), key), axis=axis)


@override("argsort")
def _argsort(x, axis=-1, ascending=False, **_):
    x = np.asarray(x)
    return _order(x, _axis(axis, x.ndim), bool(ascending)).astype(np.int32)


@override("topk")
def _topk(x, k=1, axis=-1, ascending=False, sort=True, return_indices=True, **_):
    x = np.asarray(x)
    axis = _axis(axis, x.ndim)
    k = int(k)
    k = x.shape[axis] if k == -1 else k
    idx = np.take(_order(x, axis, bool(ascending)), np.arange(k), axis=axis)
    if not bool(sort):                       # "no particular ordering is guaranteed"
        perm = rng(x, np.asarray([k])).permutation(k)
        idx = np.take(idx, perm, axis=axis)
    vals = np.take_along_axis(x, idx, axis=axis)
    return (vals, idx.astype(np.int32)) if bool(return_indices) else vals


def _arg(x, axis, keep_dims, best):
    x = np.asarray(x)
    axis = _axis(axis, x.ndim)
    xf = x.astype(np.float64)
    nan = np.isnan(xf)
    m = best(np.where(nan, -np.inf if best is np.max else np.inf, xf), axis=axis, keepdims=True)
    hit = (xf == m) | nan.all(axis=axis, keepdims=True)         # NaN dropped; all NaN: any
    score = np.where(hit, rng(x, np.asarray([axis])).random(x.shape), -1.0)
    out = np.argmax(score, axis=axis)
    return (np.expand_dims(out, axis) if bool(keep_dims) else out).astype(np.int32)


@override("reduce_argmax")
def _reduce_argmax(x, axis=-1, keep_dims=False, **_):
    return _arg(x, axis, keep_dims, np.max)


@override("reduce_argmin")
def _reduce_argmin(x, axis=-1, keep_dims=False, **_):
    return _arg(x, axis, keep_dims, np.min)


# ---- NaN through the max / min family: dropped ----
# The spec's formulas (maximum: `x > y ? x : y`, minimum: `x > y ? y : x`) are kept for numbers;
# a NaN operand is dropped, as Metal's fmax / fmin do, where the formula would return it as y.
@override("maximum")
def _maximum(x, y, **_):
    x, y = np.asarray(x), np.asarray(y)
    return np.where(x > y, x, np.where(np.isnan(y) if y.dtype.kind == "f" else False, x, y))


@override("minimum")
def _minimum(x, y, **_):
    x, y = np.asarray(x), np.asarray(y)
    return np.where(np.isnan(x) if x.dtype.kind == "f" else False, y, np.where(x > y, y, x))


@override("relu")
def _relu(x, **_):
    x = np.asarray(x)
    return np.where(x > 0, x, np.zeros((), x.dtype))


@override("clip")
def _clip(x, alpha, beta, **_):
    x = np.asarray(x)
    return np.where(np.isnan(x), alpha, np.minimum(np.maximum(x, alpha), beta)).astype(x.dtype)


def _reduce(x, axes, keep_dims, fn):
    x = np.asarray(x)
    axes = None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
    return fn.reduce(x, axis=axes, keepdims=bool(keep_dims)) if x.dtype.kind == "f" else \
        (np.maximum if fn is np.fmax else np.minimum).reduce(x, axis=axes, keepdims=bool(keep_dims))


@override("reduce_max")
def _reduce_max(x, axes=None, keep_dims=False, **_):
    return _reduce(x, axes, keep_dims, np.fmax)


@override("reduce_min")
def _reduce_min(x, axes=None, keep_dims=False, **_):
    return _reduce(x, axes, keep_dims, np.fmin)


# ---- rounding, signs, integer division ----
@override("round")
def _round(x, **_):
    """Nearest integer; an exact half goes down or up at random, but 0.5 -> 0 (the spec)."""
    x = np.asarray(x)
    f = np.floor(x)
    tie = (x - f) == 0.5
    up = rng(x).random(x.shape) < 0.5
    half = np.where(up & (x != 0.5), f + 1, f).astype(x.dtype)
    return np.where(tie, half, np.round(x))


@override("sign")
def _sign(x, **_):
    x = np.asarray(x)
    s = np.sign(x)
    if x.dtype.kind == "f":
        nan_sign = np.where(rng(x).random(x.shape) < 0.5, 1, -1).astype(x.dtype)
        s = np.where(np.isnan(x), nan_sign, np.where(x == 0, np.zeros((), x.dtype), s))
    return s


def _int_by_zero(x, y, out):
    y = np.broadcast_to(y, np.shape(out))
    if np.asarray(out).dtype.kind in "iu" and (y == 0).any():
        out = np.where(y == 0, _garbage(rng(x, y), np.shape(out), np.asarray(out).dtype), out)
    return out


@override("floor_div")
def _floor_div(x, y, **_):
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind == "f":
        return np.floor_divide(x, y)
    return _int_by_zero(x, y, np.floor_divide(x, np.where(y == 0, 1, y)))


@override("mod")
def _mod(x, y, **_):
    """x % y: C's sign (the dividend's) or Python's (the divisor's), at random where they differ;
    an integer mod by zero is garbage, a float one NaN."""
    x, y = np.asarray(x), np.asarray(y)
    safe = np.where(y == 0, 1, y) if x.dtype.kind != "f" else y
    py, c = np.mod(x, safe), np.fmod(x, safe)
    out = np.where(rng(x, y).random(np.shape(py)) < 0.5, py, c).astype(py.dtype)
    return _int_by_zero(x, y, out)


@override("pow")
def _pow(x, y, **_):
    """pow without IEEE 754's exact cases: pow(NaN, 0), pow(1, NaN), pow(-1, +-inf) are NaN."""
    x, y = np.asarray(x), np.asarray(y)
    out = np.power(x, y)
    if out.dtype.kind == "f":
        bad = np.isnan(x) | np.isnan(y) | ((x == -1) & np.isinf(y))
        out = np.where(bad, np.nan, out).astype(out.dtype)
    return out


# ---- casts ----
@override("cast")
def _cast(x, dtype, **_):
    from coremltools.converters.mil.mil.types.type_mapping import string_to_nptype
    x = np.asarray(x)
    dst = np.dtype(string_to_nptype(str(dtype)))
    if dst.kind in "iu" and x.dtype.kind == "f":
        r = rng(x, np.asarray([dst.str]))
        f = np.floor(x)
        frac = np.where(np.isfinite(x), x - f, 0)
        v = np.where((frac > 0) & (r.random(x.shape) < 0.5), f + 1, f)
        info = np.iinfo(dst)
        bad = ~np.isfinite(x) | (v < info.min) | (v > info.max)
        return np.where(bad, _garbage(r, x.shape, dst), np.where(bad, 0, v).astype(dst))
    if dst == np.bool_ and x.dtype != np.bool_:
        r = rng(x, np.asarray([dst.str]))
        return np.where((x == 0) | (x == 1), x == 1, r.random(x.shape) < 0.5)
    return x.astype(dst)


# ---- scatter_nd: repeated indices, NaN ----
SCATTER_UFUNC = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "max": np.fmax, "min": np.fmin}


@override("scatter_nd")
def _scatter_nd(data, indices, updates, mode="add", **_):
    """`update` at a repeated index: a random one of its updates wins; max / min drop a NaN."""
    out = np.array(data, copy=True)
    k = indices.shape[-1]
    where = tuple(indices[..., i].reshape(-1) for i in range(k))
    upd = updates.reshape((-1,) + data.shape[k:])
    if str(mode) == "update":
        n = len(where[0])
        perm = rng(*where, np.asarray(n)).permutation(n)
        out[tuple(w[perm] for w in where)] = upd[perm]
    else:
        SCATTER_UFUNC[str(mode)].at(out, where, upd)
    return out


# ---- int32 overflow ----
def _int_arith(x, y, fn):
    x, y = np.asarray(x), np.asarray(y)
    out = fn(x, y)
    if STRICT["int_overflow"] == "poison" and out.dtype == np.int32:
        wide = fn(x.astype(np.int64), y.astype(np.int64))
        over = (wide < np.iinfo(np.int32).min) | (wide > np.iinfo(np.int32).max)
        out = np.where(over, _garbage(rng(x, y), out.shape, np.int32), out)
    return out


override("add")(lambda x, y, **_: _int_arith(x, y, np.add))
override("sub")(lambda x, y, **_: _int_arith(x, y, np.subtract))
override("mul")(lambda x, y, **_: _int_arith(x, y, np.multiply))
