"""Core ML's erf_inv, lgamma and digamma (MIL compositions, backends/coreml/mil/special.py)
against JAX on CPU, in float32 and float16: over wide ranges (erf_inv on (-1, 1) up to the last
floats below 1; lgamma and digamma on (-10, 50) with negative non-integers next to the poles and
tiny positive arguments) and at their special values (poles, +-1, infinities, NaN).

Tolerances: float32 rtol 1e-5, atol 5e-6 (the worst case measured over these grids needs
atol 1.9e-6 at that rtol, for lgamma next to its zeros); float16 rtol 2e-3, atol 1e-3 (both
compute in float32 and round, so a result may land one float16 ulp apart)."""
import functools

import numpy as np
import pytest
from jax import lax

import rlx_jax

F32, F16 = np.float32, np.float16
TOL = {F32: dict(rtol=1e-5, atol=5e-6), F16: dict(rtol=2e-3, atol=1e-3)}
NAN, INF = np.nan, np.inf
FNS = {"erf_inv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma}

# (argument, what JAX gives) pairs (checked against JAX too)
SPECIAL = {
    "erf_inv": [(1.0, INF), (-1.0, -INF), (1.5, NAN), (-1.5, NAN), (2.0, NAN), (INF, NAN),
                (-INF, NAN), (NAN, NAN), (0.0, 0.0), (-0.0, -0.0)],
    "lgamma": [(0.0, INF), (-0.0, INF), (-1.0, INF), (-2.0, INF), (-9.0, INF), (-50.0, INF),
               (INF, INF), (-INF, INF), (NAN, NAN)],
    "digamma": [(0.0, NAN), (-0.0, NAN), (-1.0, NAN), (-2.0, NAN), (-9.0, NAN), (-INF, NAN),
                (INF, INF), (NAN, NAN)],
}


def _every_f16(lo, hi):
    """Every finite float16 strictly between lo and hi."""
    v = np.arange(1 << 16, dtype=np.uint16).view(F16)
    return np.unique(v[np.isfinite(v) & (v > lo) & (v < hi)])


def _grid(name, dtype):
    if dtype == F16:
        return _every_f16(-1, 1) if name == "erf_inv" else _every_f16(-10, 50)
    if name == "erf_inv":
        below_one = np.float32(1) - np.logspace(-7.2, 0, 1000).astype(F32)
        last = np.float32(1) - np.arange(1, 200, dtype=F32) * np.float32(2 ** -24)
        x = np.concatenate([np.linspace(-1, 1, 50001, dtype=F32)[1:-1], below_one, -below_one,
                            last, -last])
        return x[np.abs(x) < 1]
    poles = np.arange(-10, 1, dtype=F32)[:, None]
    near = (poles + np.array([-0.5, -1e-3, -1e-5, 1e-5, 1e-3, 0.25], F32)).reshape(-1)
    tiny = np.float32(10) ** np.linspace(-30, 0, 200).astype(F32)
    return np.concatenate([np.linspace(-10, 50, 100001, dtype=F32), near, tiny])


@functools.lru_cache(maxsize=None)
def _both(name, dtype):
    """(grid, special arguments, Core ML results, JAX results), each a pair over the two."""
    fn = FNS[name]
    grid = _grid(name, dtype).astype(dtype)
    special = np.asarray([x for x, _ in SPECIAL[name]], dtype)
    got = rlx_jax.jit(lambda a, b: (fn(a), fn(b)), backend="coreml")(grid, special)
    want = (fn(grid), fn(special))
    return grid, special, [np.asarray(g) for g in got], [np.asarray(w) for w in want]


@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(FNS))
def test_matches_jax_over_wide_range(name, dtype):
    grid, special, got, want = _both(name, dtype)
    for g, w, x in zip(got, want, (grid, special)):
        assert g.dtype == w.dtype == dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{name} NaN at {x}")
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   err_msg=name, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(FNS))
def test_special_values(name, dtype):
    _, special, got, want = _both(name, dtype)
    expected = np.asarray([y for _, y in SPECIAL[name]], np.float64)
    for result in (got[1], want[1]):        # Core ML, and JAX itself
        np.testing.assert_array_equal(result.astype(np.float64), expected,
                                      err_msg=f"{name}({special})")
        signed = ~np.isnan(expected)          # zeros and infinities keep their sign
        assert list(np.signbit(result[signed])) == list(np.signbit(expected[signed])), (
            name, special, result)
