"""Per-backend known divergences, merged, and the one lookup that resolves a case against them.

Each tests/divergences_<backend>.py may define
  DTYPE_DIVERGENCES = {dtype name: Expect}   what the backend does with every case of that dtype
  DIVERGENCES       = {case name: Expect}    where the reason is the case itself
A per-case entry wins over a dtype entry. A case's dtypes are those of its arguments, then those
of its results (a refused input dtype is met before a refused result dtype); the first dtype in
the backend's table order that a case has decides.
"""
import functools
import importlib

import jax
import numpy as np
import pytest

DIVERGENCES = {}            # backend -> {case name: Expect}
DTYPE_DIVERGENCES = {}      # backend -> {dtype name: Expect}
for _b in ("xla", "mlx", "coreml"):
    try:
        _m = importlib.import_module(f"tests.divergences_{_b}")
    except ModuleNotFoundError:
        _m = None
    DIVERGENCES[_b] = getattr(_m, "DIVERGENCES", {})
    DTYPE_DIVERGENCES[_b] = getattr(_m, "DTYPE_DIVERGENCES", {})


def _dtypes(tree):
    return [str(np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype))
            for x in jax.tree.leaves(tree)]


@functools.lru_cache(maxsize=None)
def _case_dtypes(case, x64):
    """(argument dtypes, result dtypes) of an op-table case; `x64` (whether jax_enable_x64 is on
    where the case is traced) is part of the cache key."""
    args = case.args(np.random.RandomState(0))
    static = set(case.static_argnums)
    dynamic = [a for i, a in enumerate(args) if i not in static]

    def call(*dyn):
        it = iter(dyn)
        return case.fn(*[a if i in static else next(it) for i, a in enumerate(args)])
    return tuple(_dtypes(dynamic)), tuple(_dtypes(jax.eval_shape(call, *dynamic)))


def _x64():
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def dtype_divergence(backend, dtype):
    """The backend's divergence for every case of `dtype` (a dtype or its name), or None."""
    return DTYPE_DIVERGENCES.get(backend, {}).get(str(np.dtype(dtype)))


def divergence(case, backend):
    """The Expect that applies to `case` on `backend`, or None."""
    own = DIVERGENCES.get(backend, {}).get(case.name)
    table = DTYPE_DIVERGENCES.get(backend, {})
    if own is not None or not table:
        return own
    for dtypes in _case_dtypes(case, _x64()):
        for dtype, expect in table.items():
            if dtype in dtypes:
                return expect
    return None


def skip_dtype(backend, dtype):
    """Skips the running test when `backend` refuses every case of `dtype`; a dtype that runs
    on the host is not skipped (its results are JAX's) and the test may place ops there
    (where_ran.expect_host, with the divergence's reason)."""
    expect = dtype_divergence(backend, dtype)
    if expect is not None and expect.error:
        pytest.skip(expect.reason)
    if expect is not None and expect.host:
        from .where_ran import expect_host
        expect_host(expect.reason)
