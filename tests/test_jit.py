"""rlx_jax.jit: decorator forms, arguments and pytrees, weak types, the executable cache,
static arguments, errors, the lower()/compile() API and thread safety. The oracle is jax.jit."""
import collections
import inspect
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.errors import BackendUnavailableError, BadArgumentError, RlxError

from .conftest import BACKENDS

HERE = os.path.basename(__file__)
X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0
Pair = collections.namedtuple("Pair", "a b")


@jax.tree_util.register_pytree_node_class
class Box:
    """A user-registered pytree node with static metadata."""

    def __init__(self, value, label):
        self.value, self.label = value, label

    def tree_flatten(self):
        return (self.value,), self.label

    @classmethod
    def tree_unflatten(cls, label, children):
        return cls(children[0], label)


def _same(got, want, rtol=1e-5, atol=1e-6):
    assert jax.tree.structure(got) == jax.tree.structure(want), (got, want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=rtol, atol=atol)


# ---- decorator forms and arguments -------------------------------------------------------------

def test_decorator_forms(backend):
    @rlx_jax.jit
    def f1(x):
        return jnp.sin(x) * 2

    @rlx_jax.jit(backend=backend)
    def f2(x):
        return jnp.sin(x) * 2

    def f(x):
        return jnp.sin(x) * 2
    f3 = rlx_jax.jit(f, backend=backend)
    want = jax.jit(f)(X)
    for fn in (f1, f2, f3):
        _same(fn(X), want)
    assert f3.__name__ == "f" and f3.__wrapped__ is f
    assert isinstance(f3, rlx_jax.Jitted)


def test_positional_and_keyword_arguments(backend):
    def f(x, y, scale=1.0, *, shift):
        return x * y * scale + shift
    j = rlx_jax.jit(f, backend=backend)
    want = f(X, X, 2.0, shift=X)
    _same(j(X, X, 2.0, shift=X), want)
    _same(j(X, y=X, scale=2.0, shift=X), want)
    _same(j(x=X, y=X, shift=X), f(X, X, shift=X))


@pytest.mark.parametrize("make", [
    lambda x: {"b": x, "a": (x * 2, [x + 1, None])},
    lambda x: [x, (x * 3,), {"k": x - 1}],
    lambda x: Pair(a=x, b=Pair(a=x * 2, b=None)),
    lambda x: Box({"w": x, "v": [x, x * 4]}, label="box"),
    lambda x: (x,),
    lambda x: None,
], ids=["dict", "list", "namedtuple", "custom_node", "tuple1", "none"])
def test_pytrees_in_and_out(make, backend):
    def f(tree):
        return jax.tree.map(lambda v: jnp.tanh(v) * 2.0, tree)
    tree = make(X)
    got = rlx_jax.jit(f, backend=backend)(tree)
    want = jax.jit(f)(tree)
    _same(got, want)
    if isinstance(want, Box):
        assert isinstance(got, Box) and got.label == "box"


@pytest.mark.parametrize("arg", [np.float32(1.5) * np.ones((2, 3), np.float32),
                                 jnp.ones((2, 3), jnp.float32) * 1.5, 1.5, 3, True],
                         ids=["numpy", "jax", "py_float", "py_int", "py_bool"])
def test_array_and_scalar_inputs(arg, backend):
    def f(x):
        return x * 2 + 1
    _same(rlx_jax.jit(f, backend=backend)(arg), jax.jit(f)(arg))


def test_weak_types_keep_array_dtype(backend):
    x16 = np.linspace(-1, 1, 6).astype(np.float16)
    f = lambda x, s: x * s + 1  # noqa: E731
    got = rlx_jax.jit(f, backend=backend)(x16, 2.5)
    want = jax.jit(f)(x16, 2.5)
    assert np.asarray(got).dtype == np.float16 == want.dtype
    _same(got, want, rtol=1e-3, atol=1e-3)
    xi = np.arange(4, dtype=np.int32)
    got = rlx_jax.jit(lambda x, s: x + s, backend=backend)(xi, 3)
    assert np.asarray(got).dtype == np.int32
    np.testing.assert_array_equal(got, xi + 3)


# ---- cache and static arguments ----------------------------------------------------------------

def test_cache_hits_and_retraces():
    j = rlx_jax.jit(lambda x, y: x * y + 1, backend="xla")
    j(X, X)
    j(X, X)
    j(X + 1, X * 2)                      # same signature: no retrace
    assert j.trace_count == 1
    j(X[:2], X[:2])                      # new shape
    assert j.trace_count == 2
    j(X.astype(np.float16), X.astype(np.float16))   # new dtype
    assert j.trace_count == 3
    j(X, 2.0)                            # weak-typed python scalar: another signature
    j(X, 3.0)
    assert j.trace_count == 4
    j(X[:2], X[:2])
    assert j.trace_count == 4


def test_static_argnums_and_argnames():
    calls = []

    def f(x, n, *, mode="add"):
        calls.append(1)
        return x + n if mode == "add" else x * n

    j = rlx_jax.jit(f, backend="xla", static_argnums=1, static_argnames="mode")
    _same(j(X, 2), X + 2)
    _same(j(X, 2), X + 2)
    assert j.trace_count == 1
    _same(j(X, 3), X + 3)
    assert j.trace_count == 2
    _same(j(X, 3, mode="mul"), X * 3)
    assert j.trace_count == 3
    neg = rlx_jax.jit(lambda x, k: x[:k] * 2, backend="xla", static_argnums=-1)
    _same(neg(X, 2), X[:2] * 2)
    _same(neg(X, 1), X[:1] * 2)
    assert neg.trace_count == 2
    by_name = rlx_jax.jit(lambda x, k: x[:k] * 2, backend="xla", static_argnames=("k",))
    _same(by_name(X, k=2), X[:2] * 2)
    _same(by_name(X, 2), X[:2] * 2)       # given positionally, still static by name


# ---- errors ------------------------------------------------------------------------------------

def test_bad_arguments():
    j = rlx_jax.jit(lambda x, n: x * len(n), backend="xla", static_argnums=1)
    with pytest.raises(BadArgumentError, match="Non-hashable.*tuple instead of a list"):
        j(X, [1, 2])
    two = rlx_jax.jit(lambda x, y: x + y, backend="xla")
    with pytest.raises(BadArgumentError):
        two(X)
    with pytest.raises(BadArgumentError):
        two(X, X, X)
    with pytest.raises(BadArgumentError, match="str"):
        two(X, "hello")
    with pytest.raises(BadArgumentError, match="unknown backend"):
        rlx_jax.jit(lambda x: x, backend="tpu9000")(X)
    with pytest.raises(BadArgumentError):
        rlx_jax.jit(lambda x: x, backend=3)
    with pytest.raises(BadArgumentError):
        rlx_jax.jit(42)
    assert issubclass(BadArgumentError, RlxError) and issubclass(BackendUnavailableError,
                                                                 RlxError)


@pytest.mark.parametrize("backend", ["xla", "mlx"])
def test_masked_arrays_are_refused_as_jax_jit_refuses_them(backend):
    masked = np.ma.array([1.0, 2.0], mask=[True, False])
    with pytest.raises(ValueError, match="numpy masked arrays are not supported") as e:
        rlx_jax.jit(jnp.asarray, backend=backend)(masked)
    assert isinstance(e.value, BadArgumentError) and "args[0] of asarray" in str(e.value)
    with pytest.raises(ValueError, match="numpy masked arrays are not supported"):
        jax.jit(jnp.asarray)(masked)


# ---- lower / compile ---------------------------------------------------------------------------

def _small(x, w):
    h = jnp.dot(x, w)
    return jnp.sum(jax.nn.relu(h) * 2.0, axis=0)


def test_lower_api():
    w = np.ones((4, 2), np.float32) / 3
    lowered = rlx_jax.jit(_small, backend="xla").lower(X, w)
    assert lowered.graph.op_counts() == {"Binary": 2, "DotGeneral": 1, "Reduce": 1}
    assert lowered.op_counts() == {"Binary": 2, "DotGeneral": 1, "Reduce": 1}
    text = lowered.as_text()
    line = inspect.getsourcelines(_small)[1] + 1
    assert f"{HERE}:{line} (_small)" in text, text
    assert "DotGeneral" in text and "Reduce[fn=sum" in text
    assert lowered.legalized.inputs and len(lowered.legalized.inputs) == 2
    compiled = lowered.compile()
    _same(compiled(X, w), jax.jit(_small)(X, w))
    with pytest.raises(BadArgumentError):
        compiled((X, w))
    assert set(lowered.timings) >= {"make_jaxpr", "frontend", "legalize", "lower"}


def test_lower_does_not_fill_the_call_cache():
    j = rlx_jax.jit(lambda x: x * 2, backend="xla")
    j.lower(X)
    j(X)
    assert j.trace_count == 2


# ---- threads -----------------------------------------------------------------------------------

def test_concurrent_calls_trace_once_per_signature():
    j = rlx_jax.jit(lambda x: jnp.tanh(x) * 3 + x, backend="xla")
    inputs = [X, X[:2], X + 1, X[:2] * 2] * 4
    results, errors = [None] * 16, []
    start = threading.Barrier(8)

    def worker(k):
        try:
            start.wait()
            for i in range(k, 16, 8):
                results[i] = np.asarray(j(inputs[i]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for x, got in zip(inputs, results):
        np.testing.assert_allclose(got, np.tanh(x) * 3 + x, rtol=1e-5, atol=1e-6)
    assert j.trace_count == 2


def test_backends_listed():
    assert "xla" in rlx_jax.available_backends()
    assert set(BACKENDS) == set(rlx_jax.available_backends())
