"""int64 / float64 cases under jax_enable_x64 (run by `pytest -m x64`), on every backend.

x64 is switched on per test through a fixture (a thread-local context), so it cannot leak into
the default, 32-bit test run. Backends without 64-bit types record that as a divergence."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from .conftest import BACKENDS
from .op_table_base import Case, args, arr, const, over
from .test_ops import check_case

pytestmark = pytest.mark.x64
F64, I64, U64 = "float64", "int64", "uint64"


def _x64_cases():
    f64 = lambda *s, lo=-2, hi=2: arr(F64, *s, lo=lo, hi=hi)  # noqa: E731
    return [
        *over("x64_add", lax.add, (F64, I64, U64), lambda dt: args(arr(dt, 3, 4, lo=0, hi=9),
                                                                   arr(dt, 3, 4, lo=0, hi=9)),
              grad=True),
        *over("x64_mul", lax.mul, (F64, I64), lambda dt: args(arr(dt, 3, 4), arr(dt, 3, 4))),
        Case("x64_div_f64", lax.div, args(f64(3, 4), f64(3, 4, lo=0.5, hi=2)), grad=True,
             atol=1e-12, rtol=1e-12),
        Case("x64_div_rem_i64_signs", lambda x, y: (lax.div(x, y), lax.rem(x, y)),
             args(const([7, -7, 7, -7, 2 ** 40 + 3, -(2 ** 40)], I64),
                  const([2, 2, -2, -2, 5, 3], I64))),
        Case("x64_large_i64", lambda x: x * 3 + 2 ** 35, args(const([2 ** 40, -5, 7], I64))),
        *[Case(f"x64_{fn}_f64", getattr(lax, fn), args(f64(3, 5, lo=0.2, hi=2.0)), grad=True,
               atol=1e-12, rtol=1e-12) for fn in ("exp", "log", "sin", "tanh", "sqrt", "erf")],
        Case("x64_precision_f64", lambda x: (x + 1e-12) - x, args(const([1.0, 2.0], F64)),
             atol=1e-20, rtol=1e-6),
        *[Case(f"x64_{name}_i64", fn,
               args(const([1, -1, 2 ** 40, -(2 ** 62)], I64), const([0, 63, 64, 70], I64)))
          for name, fn in [("shift_left", lax.shift_left),
                           ("shift_right_logical", lax.shift_right_logical),
                           ("shift_right_arithmetic", lax.shift_right_arithmetic)]],
        Case("x64_matmul_f64", jnp.matmul, args(f64(4, 3), f64(3, 5)), grad=True, atol=1e-12,
             rtol=1e-12),
        Case("x64_dot_pet_f64", lambda x, y: lax.dot_general(
            x, y, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float64),
            args(arr("float32", 3, 4), arr("float32", 4, 2)), atol=1e-6, rtol=1e-6),
        *over("x64_reduce_sum", lambda x: jnp.sum(x, axis=1), (F64, I64),
              lambda dt: args(arr(dt, 3, 5)), grad=True),
        Case("x64_reduce_max_i64", lambda x: jnp.max(x, axis=0), args(arr(I64, 4, 3))),
        Case("x64_argmax_f64", lambda x: jnp.argmax(x, axis=1), args(f64(3, 5))),
        Case("x64_cumsum_i64", lambda x: jnp.cumsum(x, axis=1), args(arr(I64, 3, 5))),
        Case("x64_sort_f64", lambda x: jnp.sort(x, axis=1), args(f64(3, 6)), grad=True),
        Case("x64_iota_i64", lambda x: x + jnp.arange(5, dtype=jnp.int64), args(arr(I64, 5))),
        Case("x64_convert", lambda x: (x.astype(jnp.float32), x.astype(jnp.int64),
                                       x.astype(jnp.float16)), args(f64(3, 4, lo=-50, hi=50))),
        Case("x64_convert_i64_f64", lambda x: x.astype(jnp.float64) / 3,
             args(const([2 ** 53 + 1, -7, 3], I64))),
        Case("x64_bitcast", lambda x: lax.bitcast_convert_type(x, jnp.int64), args(f64(3))),
        Case("x64_gather_i64_index", lambda x, i: x[i], args(f64(5, 2), const([4, 0, -1], I64)),
             grad=True),
        Case("x64_scatter_add_f64", lambda x, i, u: x.at[i].add(u),
             args(f64(5, 2), const([1, 1, 3], I64), f64(3, 2)), grad=True),
        Case("x64_python_scalar_weak", lambda x: x * 2.5 + 1, args(f64(3))),
    ]


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def cases():
    with jax.enable_x64(True):
        return {c.name: c for c in _x64_cases()}


_NAMES = [c.name for c in _x64_cases()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", _NAMES)
def test_x64_case(name, backend, cases):
    case = cases[name]
    a = case.args(np.random.RandomState(0))
    assert any(np.asarray(x).dtype.itemsize == 8 for x in jax.tree.leaves(a)) or \
        "pet" in name, "an x64 case must have a 64-bit operand"
    check_case(case, backend)


def test_outputs_are_64_bit():
    import rlx_jax
    out = rlx_jax.jit(lambda x, i: (x * 2, i + 1), backend="xla")(
        np.ones(3, np.float64), np.arange(3, dtype=np.int64))
    assert np.asarray(out[0]).dtype == np.float64 and np.asarray(out[1]).dtype == np.int64
