"""Forward and jax.grad of representative programs through rlx_jax.jit on every backend against
JAX on CPU; float64 central finite differences on the reference backend (x64)."""
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax

from .conftest import BACKENDS
from .programs import PROGRAMS


def _setup(prog, dtype=np.float32, seed=0):
    r = np.random.RandomState(seed)
    return prog.params(r, dtype), prog.inputs(r, dtype)


def _close(got, want, atol, rtol, what):
    assert jax.tree.structure(got) == jax.tree.structure(want), what
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype,
                                                           w.dtype)
        np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=what)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.name)
def test_forward_and_grad(prog, backend):
    params, inputs = _setup(prog)
    want = jax.jit(prog.fn)(params, *inputs)
    got = rlx_jax.jit(prog.fn, backend=backend)(params, *inputs)
    _close(got, want, prog.atol, prog.rtol, f"{prog.name} forward on {backend}")
    gwant = jax.jit(jax.grad(prog.fn))(params, *inputs)
    ggot = rlx_jax.jit(jax.grad(prog.fn), backend=backend)(params, *inputs)
    _close(ggot, gwant, prog.atol * 10, prog.rtol * 10, f"{prog.name} grad on {backend}")


def test_grads_are_not_trivial():
    """Every parameter of every program gets a non-zero gradient (the checks above bite)."""
    for prog in PROGRAMS:
        params, inputs = _setup(prog)
        for leaf in jax.tree.leaves(jax.jit(jax.grad(prog.fn))(params, *inputs)):
            assert np.abs(np.asarray(leaf)).max() > 1e-6, prog.name


@pytest.fixture
def x64():
    """jax_enable_x64 for one test, restored afterwards (the context is thread-local)."""
    with jax.enable_x64(True):
        yield


@pytest.mark.x64
@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.name)
def test_grad_matches_central_differences_f64(prog, x64):
    params, inputs = _setup(prog, np.float64)
    grad = rlx_jax.jit(jax.grad(prog.fn), backend="xla")(params, *inputs)
    assert all(np.asarray(g).dtype == np.float64 for g in jax.tree.leaves(grad))
    loss = jax.jit(prog.fn)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    gflat = np.asarray(jax.flatten_util.ravel_pytree(grad)[0])
    r = np.random.RandomState(1)
    eps = 1e-6
    for _ in range(3):
        v = r.standard_normal(flat.shape)
        v /= np.linalg.norm(v)
        up = float(loss(unravel(flat + eps * v), *inputs))
        down = float(loss(unravel(flat - eps * v), *inputs))
        fd = (up - down) / (2 * eps)
        np.testing.assert_allclose(gflat @ v, fd, rtol=1e-5, atol=1e-7, err_msg=prog.name)
    # and each coordinate of a few random entries
    for i in r.choice(flat.size, size=min(5, flat.size), replace=False):
        e = np.zeros(flat.shape)
        e[i] = eps
        fd = (float(loss(unravel(flat + e), *inputs)) - float(loss(unravel(flat - e), *inputs)))
        np.testing.assert_allclose(gflat[i], fd / (2 * eps), rtol=1e-5, atol=1e-7,
                                   err_msg=f"{prog.name}[{i}]")


@pytest.mark.x64
def test_x64_fixture_enables_64_bit(x64):
    assert jnp.ones(2, jnp.float64).dtype == jnp.float64


@pytest.mark.x64
def test_x64_does_not_leak():
    """Runs after the x64 tests above (file order): the switch did not outlive them."""
    assert not jax.config.jax_enable_x64
    assert jnp.asarray(1.0).dtype == jnp.float32 and jnp.asarray(1).dtype == jnp.int32


def _adam_step(loss):
    def step(params, m, v, t, *inputs):
        value, g = jax.value_and_grad(loss)(params, *inputs)
        m = jax.tree.map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
        v = jax.tree.map(lambda v_, g_: 0.999 * v_ + 0.001 * g_ * g_, v, g)
        params = jax.tree.map(
            lambda p, m_, v_: p - 1e-2 * (m_ / (1 - 0.9 ** t)) / (
                jnp.sqrt(v_ / (1 - 0.999 ** t)) + 1e-8), params, m, v)
        return params, m, v, value
    return step


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prog", [p for p in PROGRAMS if p.name in ("mlp", "convnet", "rnn_lm")],
                         ids=lambda p: p.name)
def test_adam_training_steps(prog, backend):
    """Three Adam steps (pytree state, python-scalar step count) match jax.jit; one trace."""
    params, inputs = _setup(prog)
    zeros = jax.tree.map(np.zeros_like, params)
    step = _adam_step(prog.fn)
    ours, want = rlx_jax.jit(step, backend=backend), jax.jit(step)
    a = b = (params, zeros, zeros)
    for t in range(1, 4):
        a = ours(*a[:3], float(t), *inputs)
        b = want(*b[:3], float(t), *inputs)
    _close(a, b, prog.atol * 10, prog.rtol * 10, f"{prog.name} adam on {backend}")
    assert ours.trace_count == 1


def _accumulating_step(loss):
    """An SGD step whose gradient is summed over micro-batches by a lax.fori_loop."""
    def step(params, micro):
        def acc(i, g):
            return jax.tree.map(jnp.add, g, jax.grad(loss)(params, micro[i]))
        g = lax.fori_loop(0, micro.shape[0], acc, jax.tree.map(jnp.zeros_like, params))
        return jax.tree.map(lambda w, d: w - 0.5 * d / micro.shape[0], params, g)
    return step


@pytest.mark.parametrize("backend", BACKENDS)
def test_rnn_lm_trained_with_fori_loop_accumulation(backend):
    """The lax.scan language model, three steps of a fori_loop gradient accumulation over two
    micro-batches each, equal to jax.jit."""
    prog = next(p for p in PROGRAMS if p.name == "rnn_lm")
    params, _ = _setup(prog)
    r = np.random.RandomState(2)
    data = [r.randint(0, 6, (2, 3, 7)).astype(np.int32) for _ in range(3)]
    step = _accumulating_step(prog.fn)
    ours, want = rlx_jax.jit(step, backend=backend), jax.jit(step)
    a = b = params
    for micro in data:
        a, b = ours(a, micro), want(b, micro)
    _close(a, b, prog.atol * 10, prog.rtol * 10, f"rnn_lm accumulation on {backend}")
