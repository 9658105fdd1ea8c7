"""jax.nn.log_softmax recognised as LogSoftmax (forward, and its jax.vjp gradient as
dx = dy − exp(y)·Σ dy on the node); optax's dense-label softmax_cross_entropy, which calls it,
becomes SoftmaxCrossEntropy as a whole (tests/test_recognize_xent.py); near misses left alone;
every program equal to jax.jit and to jax.grad / finite differences."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.passes.recognize import recognize

optax = pytest.importorskip("optax")
BACKENDS = [b for b in ("xla", "mlx", "coreml") if b in rlx_jax.available_backends()]
X = np.random.default_rng(0).normal(size=(2, 3, 7)).astype(np.float32) * 4
LABELS = np.asarray(jax.nn.one_hot(np.arange(6).reshape(2, 3) % 7, 7))
W = np.random.default_rng(1).uniform(0.5, 1.5, X.shape).astype(np.float32)

PROGRAMS = {
    "forward": lambda x: jax.nn.log_softmax(x),
    "grad": jax.grad(lambda x: jnp.sum(jax.nn.log_softmax(x) * W)),
    "value_and_grad": jax.value_and_grad(lambda x: jnp.sum(jax.nn.log_softmax(x) * W)),
    "optax_ce": lambda x: optax.softmax_cross_entropy(x, LABELS),
    "optax_ce_grad": jax.grad(lambda x: optax.softmax_cross_entropy(x, LABELS).mean()),
    "smoothed_ce_grad": jax.grad(lambda x: optax.softmax_cross_entropy(
        x, optax.smooth_labels(LABELS, 0.1)).mean()),
}
# the kind each program's log_softmax ends up in (the cross-entropy's kinds take it in whole)
KIND = {"optax_ce": "SoftmaxCrossEntropy", "optax_ce_grad": "SoftmaxCrossEntropyDenseBackward",
        "smoothed_ce_grad": "SoftmaxCrossEntropyDenseBackward"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_log_softmax_is_recognised_and_equals_jax(name, backend):
    fn, kind = PROGRAMS[name], KIND.get(name, "LogSoftmax")
    traced = rlx_jax.trace(fn, X)
    assert recognize(traced).op_counts().get(kind) == 1
    assert kind not in traced.op_counts()
    counts = rlx_jax.jit(fn, backend=backend).lower(X).op_counts()
    assert (kind in counts) == (backend != "xla")     # xla decomposes the kind
    if name == "forward" and backend != "xla":
        assert counts == {"LogSoftmax": 1}
    got, want = rlx_jax.jit(fn, backend=backend)(X), jax.jit(fn)(X)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6), got, want)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "xla"])
def test_gradients_against_jax_and_finite_differences(backend):
    loss = lambda x: jnp.sum(jax.nn.log_softmax(x) * W)        # noqa: E731
    rlx_jax.testing.check_grads(loss, (X,), backend=backend)


NEAR_MISSES = {
    "no max subtraction": lambda x: x - jnp.log(jnp.sum(jnp.exp(x), -1, keepdims=True)),
    "log of softmax": lambda x: jnp.log(jax.nn.softmax(x)),
    "max over another axis": lambda x: (x - jnp.max(x, 0, keepdims=True)) - jnp.log(
        jnp.sum(jnp.exp(x - jnp.max(x, 0, keepdims=True)), -1, keepdims=True)),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_are_not_log_softmax(name):
    fn = NEAR_MISSES[name]
    assert "LogSoftmax" not in recognize(rlx_jax.trace(fn, X)).op_counts()
    backend = "mlx" if "mlx" in BACKENDS else "xla"
    np.testing.assert_allclose(np.asarray(rlx_jax.jit(fn, backend=backend)(X)),
                               np.asarray(jax.jit(fn)(X)), rtol=1e-5, atol=1e-5)
