"""The cached call path: results as jax.Arrays without device_put (zero-copy where the buffer
is 64-byte aligned, one copy otherwise), results fed back without a copy, the xla backend's
calls through jax.jit's own dispatch, and the cache key (JAX's trace context). Oracles: the
values numpy/JAX compute, buffer addresses, and call counts."""
import gc

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import rlx_jax
from rlx_jax import jax_arrays
from rlx_jax.stages import Compiled


def _aligned(n, dtype=np.float32, offset=0):
    """A numpy array of n elements whose buffer starts `offset` bytes past a 64-byte boundary."""
    item = np.dtype(dtype).itemsize
    buf = np.empty(n * item + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    return buf[start:start + n * item].view(dtype)


@pytest.mark.parametrize("offset", [0, 4, 8, 16])
def test_from_numpy_aliases_aligned_buffers_and_copies_others(offset):
    x = _aligned(33, offset=offset)
    x[:] = np.arange(33, dtype=np.float32) * 0.5
    (j,) = jax_arrays.from_numpy([x])
    assert jax_arrays.aligned(x) is (offset == 0)
    assert jax_arrays.shares_memory(j, x) is (offset == 0)
    np.testing.assert_array_equal(np.asarray(j), np.arange(33, dtype=np.float32) * 0.5)
    assert j.dtype == np.float32 and not j.weak_type and not j.committed


def test_from_numpy_weak_types_views_and_dtypes():
    rev = np.arange(6, dtype=np.float32)[::-1]
    strided = np.arange(12, dtype=np.int32).reshape(3, 4).T
    half = np.arange(4).astype(ml_dtypes.bfloat16)
    outs = jax_arrays.from_numpy([rev, strided, half, np.float32(2.5), np.zeros((0, 3))],
                                 (True, False, False, True))
    for got, want in zip(outs, [rev, strided, half, np.float32(2.5), np.zeros((0, 3))]):
        assert got.dtype == want.dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(np.asarray(got), want)
    assert [o.weak_type for o in outs] == [True, False, False, True, False]
    # an aliased result keeps its buffer's owner alive
    x = _aligned(8)
    x[:] = 7
    (j,) = jax_arrays.from_numpy([x])
    del x
    gc.collect()
    np.testing.assert_array_equal(np.asarray(j), np.full(8, 7, np.float32))


def test_mlx_results_alias_aligned_mlx_memory_and_copy_unaligned():
    mx = pytest.importorskip("mlx.core")
    from rlx_jax.backends.mlx.runtime import backing_array, to_jax, to_numpy
    big = mx.arange(80, dtype=mx.float32)
    mx.eval(big)
    k = ((-to_numpy(big).ctypes.data) % 64) // 4       # MLX buffers are 8-byte aligned at least
    aligned, unaligned = big[k:k + 16], big[k + 1:k + 17]
    mx.eval(aligned, unaligned)
    ja, ju = to_jax([aligned, unaligned], (False, True))
    assert jax_arrays.shares_memory(ja, to_numpy(aligned))
    assert not jax_arrays.shares_memory(ju, to_numpy(unaligned))
    assert not ja.weak_type and ju.weak_type
    assert backing_array(ja) is aligned and backing_array(ju) is unaligned
    del big, aligned, unaligned
    gc.collect()
    np.testing.assert_array_equal(np.asarray(ja), np.arange(k, k + 16, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(ju), np.arange(k + 1, k + 17, dtype=np.float32))


def test_mlx_default_results_fed_back_are_not_copied(monkeypatch):
    mx = pytest.importorskip("mlx.core")
    from rlx_jax.backends.mlx import runtime
    f = rlx_jax.jit(lambda p, x: jax.tree.map(lambda a: a * 0.5 + x, p), backend="mlx")
    p = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    out = f(p, 1.0)
    backing = {k: runtime.backing_array(v) for k, v in out.items()}
    assert all(isinstance(b, mx.array) for b in backing.values())
    made = []
    real = mx.array
    monkeypatch.setattr(runtime.mx, "array", lambda *a, **k: made.append(a) or real(*a, **k))
    seen = [runtime.to_mx(v, np.dtype(np.float32)) for v in out.values()]
    assert made == [] and all(s is backing[k] for s, k in zip(seen, out))
    again = f(out, 1.0)
    assert [a for a in made if np.ndim(a[0])] == []   # only the scalar 1.0 was made an mx.array
    want = jax.tree.map(lambda a: (a * 0.5 + 1.0) * 0.5 + 1.0, p)
    for k in p:
        np.testing.assert_allclose(np.asarray(again[k]), np.asarray(want[k]), rtol=1e-6)


def test_coreml_results_never_alias_the_callers_arrays():
    f = rlx_jax.jit(lambda x, y: (x, y + 1.0), backend="coreml")
    x = _aligned(16)
    x[:] = 3.0
    a, b = f(x, np.ones(16, np.float32))
    x[:] = -1.0                                # the caller writes into its own array
    np.testing.assert_array_equal(np.asarray(a), np.full(16, 3.0, np.float32))
    np.testing.assert_array_equal(np.asarray(b), np.full(16, 2.0, np.float32))
    assert isinstance(a, jax.Array)


def _calls(monkeypatch):
    seen = []
    real = Compiled.call_flat
    monkeypatch.setattr(Compiled, "call_flat", lambda self, leaves: seen.append(1) or
                        real(self, leaves))
    return seen


def test_xla_cached_calls_take_jax_jits_dispatch(monkeypatch):
    def step(params, x, *, scale):
        return {"y": params["w"] @ x * scale, "n": jnp.sum(x) + 1}
    f = rlx_jax.jit(step, backend="xla", static_argnames=("scale",))
    plain = jax.jit(step, static_argnames=("scale",))
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    seen = _calls(monkeypatch)
    for i in range(5):
        x = jnp.arange(3.0) + i
        got, want = f(params, x, scale=2.0), plain(params, x, scale=2.0)
        jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-6), got, want)
    assert len(seen) == 1 and f.trace_count == 1   # only the first call took rlx_jax's path
    f(params, x, scale=3.0)                         # a new static value: traced and compiled
    f(params, x, scale=3.0)
    assert len(seen) == 2 and f.trace_count == 2
    f.clear_cache()
    f(params, x, scale=3.0)
    assert f.trace_count == 3


def test_xla_direct_calls_keep_weak_types_keys_and_refusals(monkeypatch):
    f = rlx_jax.jit(lambda k, x: (jax.random.split(k)[0], x * 2, 1.0), backend="xla")
    plain = jax.jit(lambda k, x: (jax.random.split(k)[0], x * 2, 1.0))
    key = jax.random.key(0)
    for _ in range(3):
        got, want = f(key, 3.0), plain(key, 3.0)
        assert jax.random.key_data(got[0]).tolist() == jax.random.key_data(want[0]).tolist()
        assert [g.weak_type for g in got[1:]] == [w.weak_type for w in want[1:]] == [True] * 2
    inc = rlx_jax.jit(lambda i: i + 1, backend="xla")
    assert [int(inc(3)), int(inc(4))] == [4, 5]          # the second call is a direct one
    with pytest.raises(OverflowError, match="outside int32"):   # rlx_jax's own message
        inc(2 ** 40)
    g = rlx_jax.jit(lambda x: jnp.log(x), backend="xla")
    g(jnp.ones(3))
    with jax.debug_nans(True), pytest.raises(FloatingPointError, match="rlx_jax.jit"):
        g(-jnp.ones(3))
    mx = pytest.importorskip("mlx.core")
    h = rlx_jax.jit(lambda x: x + 1, backend="xla")
    h(jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(h(mx.array([1.0, 2.0]))), [2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(h(jnp.ones(2))), [2.0, 2.0])


def test_xla_direct_path_leaves_transformations_to_rlx_jax():
    f = rlx_jax.jit(lambda x: jnp.sin(x) * x, backend="xla")
    x = jnp.arange(4.0)
    f(x)
    f(x)
    grad = jax.grad(lambda v: f(v).sum())(x)
    np.testing.assert_allclose(grad, jnp.cos(x) * x + jnp.sin(x), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(f)(x[:, None])[:, 0], jnp.sin(x) * x, rtol=1e-6)
    with jax.disable_jit():
        np.testing.assert_allclose(f(x), jnp.sin(x) * x, rtol=1e-6)


@pytest.mark.parametrize("backend", ["xla", "mlx"])
def test_the_cache_key_holds_jaxs_trace_context(backend):
    f = rlx_jax.jit(lambda x: x * 2, backend=backend)
    x = jnp.ones(3)
    f(x)
    f(x)
    assert f.trace_count == 1
    with jax.numpy_dtype_promotion("strict"):
        f(x)
        f(x)
    assert f.trace_count == 2               # as jax.jit, a new configuration traces again
    f(x)
    assert f.trace_count == 2


def _counting_flatten(monkeypatch):
    """Counts the pytree flattens of rlx_jax.jit's cached call path."""
    from rlx_jax import api
    calls, real = [], api._flatten

    def flatten(tree):
        calls.append(1)
        return real(tree)
    monkeypatch.setattr(api, "_flatten", flatten)
    return calls


@pytest.mark.parametrize("backend", ["mlx", "coreml"])
def test_plain_array_calls_reuse_the_last_program_without_a_flatten(backend, monkeypatch):
    mx = pytest.importorskip("mlx.core")
    fn = lambda a, b: a * 2 + b             # noqa: E731
    f, oracle = rlx_jax.jit(fn, backend=backend, output="numpy"), jax.jit(fn)
    a, b = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
    f(a, b)
    f(a, b)                               # the keyed call remembers its arguments' kinds
    flattens = _counting_flatten(monkeypatch)
    np.testing.assert_array_equal(f(a + 1, b), (a + 1) * 2 + b)
    assert flattens == [] and f.trace_count == 1
    # another type, shape or dtype, or another trace context, is keyed again (and right)
    cases = [(mx.array(a), b), (a[:4], b[:4]), (a.astype(np.int32), b),
             (a, b.astype(np.float16))]
    for args in cases:
        want = np.asarray(oracle(*[np.asarray(x) for x in args]))
        n = len(flattens)
        got = f(*args)
        assert len(flattens) > n
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    traces = f.trace_count
    with jax.numpy_dtype_promotion("strict"):
        n = len(flattens)
        np.testing.assert_array_equal(f(a, b), a * 2 + b)
        assert len(flattens) > n and f.trace_count == traces + 1
    f.clear_cache()
    n = len(flattens)
    np.testing.assert_array_equal(f(a, b), a * 2 + b)
    assert len(flattens) > n


def test_the_last_call_memo_skips_weak_and_keyword_arguments(monkeypatch):
    f = rlx_jax.jit(lambda a, b=1.0: a * b, backend="mlx", output="numpy")
    a = np.arange(4, dtype=np.float32)
    f(a, np.float32(3) * np.ones(4, np.float32))
    f(a, np.float32(3) * np.ones(4, np.float32))
    flattens = _counting_flatten(monkeypatch)
    calls = [lambda: f(a, b=np.full(4, 2, np.float32)),
             lambda: f(a, 2.0),                               # a Python float is weak
             lambda: f(a, jnp.full(4, 2.0))]
    for call in calls + calls:                                # new, then cached, signatures
        n = len(flattens)
        np.testing.assert_array_equal(call(), a * 2)
        assert len(flattens) > n


@pytest.mark.parametrize("backend", ["mlx", "coreml", "xla"])
def test_results_are_made_under_a_disallowing_transfer_guard(backend):
    """jax.transfer_guard("disallow") refuses implicit transfers of the user's data, not a
    program's results (JAX's testAsarray: a jitted closure over a constant)."""
    x = np.arange(3, dtype=np.float32)
    f = rlx_jax.jit(lambda: jnp.asarray(x) * 2, backend=backend)
    with jax.transfer_guard("disallow"):
        got = f()
        again = f()
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(got, x * 2)
    np.testing.assert_array_equal(again, x * 2)


@pytest.mark.parametrize("backend", ["mlx", "coreml", "xla"])
def test_results_under_an_explicit_mesh_are_named_shardings(backend):
    """Under jax.set_mesh with Explicit axes, jax.jit's results are NamedShardings of the mesh
    with the jaxpr's specs (JAX's test_ragged_dot_out_sharding); so are rlx_jax's."""
    from jax.sharding import PartitionSpec as P
    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))

    def f(a, b):
        return jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", None)), a.sum()
    a, b = np.ones((4, 3), np.float32), np.arange(6, dtype=np.float32).reshape(3, 2)
    with jax.set_mesh(mesh):
        got, want = rlx_jax.jit(f, backend=backend)(a, b), jax.jit(f)(a, b)
    for g, w in zip(got, want):
        assert g.sharding == w.sharding
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert got[0].sharding == jax.sharding.NamedSharding(mesh, P("x", None))
