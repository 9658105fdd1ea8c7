"""Core ML integer program inputs wider than int32 (uint32, and int64 / uint64 under
jax_enable_x64), against JAX on CPU: they are taken to hold int32-range values and narrowed to
int32 at the model boundary (a step counter cast to float32, compared, or used as an index
runs), every call's arguments are checked against that (ArgumentRangeError naming the
argument), what is computed from them is still analysed (a uint32 `count + 1` is refused), and
an Input's explicit `bounds` attribute replaces its dtype's range."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.backends.base import get_backend
from rlx_jax.backends.coreml.passes.intervals import input_bounds, intervals
from rlx_jax.ir.graph import Builder, Graph

X = np.arange(4, dtype=np.float32) - 1.5


def _counter(x, count):
    return x * count.astype(jnp.float32), jnp.where(count > 3, x, -x)


def _index(x, count):
    return x[count], jnp.take(x, count, mode="clip")


def _run(fn, *args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rlx_jax.jit(fn, backend="coreml", **options)(*args)


def _check(fn, *args):
    got, want = _run(fn, *args), jax.jit(fn)(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("count", [0, 3, 4, 7, 2 ** 31 - 1])
def test_uint32_counter_runs_narrowed(count):
    """Given: a uint32 step counter cast to float32 and compared (`jnp.where(count > 3, ...)`).
    Result: runs on Core ML, equal to JAX, up to the largest int32."""
    _check(_counter, X, np.uint32(count))


@pytest.mark.parametrize("count", [0, 2, 3])
def test_uint32_index_runs_narrowed(count):
    _check(_index, X, np.uint32(count))


@pytest.mark.parametrize("count", [2 ** 31, 2 ** 32 - 1])
def test_uint32_beyond_int32_is_refused_at_call_time(count):
    """Given: the counter program, called with a uint32 value >= 2**31, fallback="error".
    Result: ArgumentRangeError (a ValueError) naming the argument's position and name, its
    dtype, the values and the range, and what to do."""
    _run(_counter, X, np.uint32(1), fallback="error")     # compiles and runs in range
    with pytest.raises(errors.ArgumentRangeError) as e:
        _run(_counter, X, np.uint32(count), fallback="error")
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    for part in ("argument 1 ('count')", "uint32[]", f"[{count}, {count}]",
                 "[0, 2147483647]", "What to do", "backend='xla'"):
        assert part in msg, (part, msg)


@pytest.mark.host("uint32 arithmetic that may leave int32 range runs on the host: under test")
def test_uint32_arithmetic_that_may_leave_int32_runs_on_the_host():
    """Given: `count + 1` on a uint32 counter (bounds [1, 2**31]).
    Result: with fallback="error", refused before anything runs (the sum may not fit int32);
    by default the add runs on the host, exact for every uint32 count."""
    with pytest.raises(errors.LegalizationError, match=r"uint32[\s\S]*\[1, 2147483648\]"):
        rlx_jax.jit(lambda c: c + 1, backend="coreml", fallback="error")(np.uint32(3))
    for count in (3, 2 ** 31 + 5, 2 ** 32 - 1):
        _check(lambda c: c + 1, np.uint32(count))


def test_uint32_array_checked_elementwise():
    counts = np.array([0, 5, 2 ** 31 + 7], np.uint32)
    with pytest.raises(errors.ArgumentRangeError, match=r"\[0, 2147483655\]"):
        _run(lambda x, c: x[:3] * c.astype(jnp.float32), X, counts, fallback="error")


def _bounded_graph(dtype, bounds):
    b = Builder(Graph("bounded"))
    c = b.input((3,), dtype)
    if bounds is not None:
        c.node.attrs["bounds"] = bounds
    b.graph.outputs = [b.binary("add", c, b.const(np.ones(3, dtype)))]
    b.graph.input_names = ["count"]
    return b.graph.verify()


def test_input_bounds_attribute_replaces_the_dtype_range():
    """Given: a uint32 Input with bounds (0, 100) computing `c + 1`; and one without.
    Result: the analysis uses (0, 100) (the sum is in [1, 101], so it runs on Core ML) where
    the attribute is set, [0, 2**31-1] where not; calls are checked against the bounds."""
    g = _bounded_graph(np.uint32, (0, 100))
    c = g.inputs[0]
    assert input_bounds(c) == (0, 100)
    assert intervals(g)[g.outputs[0].id] == (1, 101)
    assert input_bounds(_bounded_graph(np.uint32, None).inputs[0]) == (0, 2 ** 31 - 1)
    run = get_backend("coreml").lower(g)
    out, = run(np.array([0, 7, 100], np.uint32))
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, [1, 8, 101])
    with pytest.raises(errors.ArgumentRangeError, match=r"'count'[\s\S]*outside the \[0, 100\]"):
        run(np.array([0, 101, 3], np.uint32))


@pytest.mark.x64
class TestInt64:
    """int64 / uint64 inputs under jax_enable_x64, narrowed to int32 like uint32 ones."""

    @pytest.fixture(autouse=True)
    def x64(self):
        with jax.enable_x64(True):
            yield

    @pytest.mark.parametrize("step", [-(2 ** 31), -5, 0, 4, 2 ** 31 - 1])
    def test_int64_counter_runs_narrowed(self, step):
        _check(lambda x, s: (x * s.astype(jnp.float32), jnp.where(s > 3, x, -x)), X,
               np.int64(step))

    def test_uint64_index_runs_narrowed(self):
        _check(_index, X, np.uint64(2))

    @pytest.mark.parametrize("step", [2 ** 31, -(2 ** 31) - 1, 2 ** 40])
    def test_int64_beyond_int32_is_refused_at_call_time(self, step):
        with pytest.raises(errors.ArgumentRangeError, match=r"int64\[\][\s\S]*\[-2147483648, "
                                                            r"2147483647\]"):
            _run(lambda x, s: x * s.astype(jnp.float32), X, np.int64(step), fallback="error")

    def test_int64_bounds_attribute_beyond_int32_is_refused(self):
        with pytest.raises(errors.LoweringError, match="int64"):
            get_backend("coreml").lower(_bounded_graph(np.int64, (0, 2 ** 40)))


@pytest.mark.host("a uint32 argument beyond int32 range: that call runs on the host (under test)")
@pytest.mark.parametrize("count", [2 ** 31, 2 ** 32 - 1])
def test_uint32_beyond_int32_runs_on_the_host_with_fallback_host(count, caplog):
    """Given: the counter program, called in range and then with a uint32 value >= 2**31
    (fallback="host", the default). Result: equal to JAX for both; the in-range call ran on
    Core ML, the other on the host, which the runtime and one warning say."""
    jitted = rlx_jax.jit(_counter, backend="coreml")
    for c in (np.uint32(1), np.uint32(count)):
        for g, w in zip(jax.tree.leaves(jitted(X, c)), jax.tree.leaves(jax.jit(_counter)(X, c))):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    (compiled,) = jitted._cache.values()
    assert compiled.runtime == "mil-reference+host-for-range"
    assert "runs on the host (the xla reference) for calls whose integer arguments" in caplog.text


@pytest.mark.host("bitwise ops run on the host; a uint32 argument beyond int32 range too")
@pytest.mark.parametrize("output, kind", [("jax", jax.Array), ("numpy", np.ndarray)])
def test_host_for_range_results_take_the_asked_output_form(output, kind):
    """Given: a program with a host segment (a bitwise and), called with a uint32 beyond int32.
    Result: the results are the `output` jit asked for, equal to JAX's."""
    def f(x, y):
        return x // 3 + 1, y.astype(jnp.int32) & 3
    x, y = np.array([1, 2 ** 31 + 5], np.uint32), np.arange(2, dtype=np.float32)
    jitted = rlx_jax.jit(f, backend="coreml", output=output)
    got, want = jitted(x, y), jax.jit(f)(x, y)
    for g, w in zip(got, want):
        assert isinstance(g, kind)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    (compiled,) = jitted._cache.values()
    assert compiled.runtime.endswith("+host-for-range")
