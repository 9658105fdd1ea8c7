"""Linear algebra, FFTs and complex numbers in whole programs, on every backend: a Gaussian-process
marginal likelihood and its gradient, and a training step of an FNO-style spectral layer.
Oracles: jax.jit / jax.grad on CPU, and central finite differences (float64 NumPy) for the GP
gradient. (Per-primitive cases: tests/op_table_linalg.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax

from .conftest import BACKENDS

# The kinds each backend runs on the host in these programs (everything else on the device):
# MIL has no decompositions or triangular solves; FFTs and complex values are float32 pairs.
HOST_KINDS = {"xla": set(), "mlx": set(), "coreml": {"Cholesky", "TriangularSolve"}}


def _host_kinds(f, *args):
    return {n.kind.name for n, _ in f.lower(*args).placement().host_ops()}

R = np.random.RandomState(0)
X = np.linspace(-2, 2, 12, dtype=np.float32)[:, None]
Y = np.sin(2 * X[:, 0]).astype(np.float32) + 0.1 * R.randn(12).astype(np.float32)


def gp_nll(log_params, x, y):
    """Negative log marginal likelihood of an RBF-kernel GP: cholesky, cho_solve, log det."""
    length, scale, noise = jnp.exp(log_params)
    d2 = (x - x.T) ** 2
    k = scale * jnp.exp(-0.5 * d2 / length ** 2) + (noise + 1e-4) * jnp.eye(x.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.log(jnp.diag(chol)).sum() + 0.5 * y.size * jnp.log(2 * jnp.pi)


def _fd_grad(f, p, eps=1e-4):
    """Central differences of f (evaluated in float64 NumPy through JAX with x64 off: the
    difference quotient of float32 values with eps=1e-4 is good to ~1e-3 relative)."""
    g = np.zeros_like(p, dtype=np.float64)
    for i in range(p.size):
        e = np.zeros_like(p)
        e[i] = eps
        g[i] = (float(f(p + e)) - float(f(p - e))) / (2 * eps)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.host("MIL has no matrix decompositions: they run on the host", backends=("coreml",))
def test_gaussian_process_marginal_likelihood_gradient(backend):
    p = np.array([0.1, 0.2, -1.5], np.float32)
    value = rlx_jax.jit(gp_nll, backend=backend)(p, X, Y)
    np.testing.assert_allclose(np.asarray(value), jax.jit(gp_nll)(p, X, Y), rtol=1e-5)
    jitted_grad = rlx_jax.jit(jax.grad(gp_nll), backend=backend)
    assert _host_kinds(jitted_grad, p, X, Y) == HOST_KINDS[backend]
    grad = np.asarray(jitted_grad(p, X, Y))
    np.testing.assert_allclose(grad, jax.grad(gp_nll)(p, X, Y), rtol=1e-4, atol=1e-4)
    fd = _fd_grad(lambda q: jax.jit(gp_nll)(q, X, Y), p)
    np.testing.assert_allclose(grad, fd, rtol=2e-2, atol=2e-2)


MODES = 6


def spectral_layer(params, x):
    """One FNO block on (batch, channels, length): rfft over length, the lowest MODES modes
    mixed across channels by complex weights, irfft, plus a pointwise linear path and gelu."""
    wr, wi, w_point = params["wr"], params["wi"], params["w_point"]
    xf = jnp.fft.rfft(x, axis=-1)[..., :MODES]
    mixed = jnp.einsum("bim,iom->bom", xf, lax_complex(wr, wi))
    out = jnp.fft.irfft(mixed, n=x.shape[-1], axis=-1)
    return jax.nn.gelu(out + jnp.einsum("bil,io->bol", x, w_point))


def lax_complex(re, im):
    return jax.lax.complex(re, im)


def fno_step(params, x, target):
    def loss(p):
        return jnp.mean((spectral_layer(p, x) - target) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fno_spectral_layer_training_step(backend):
    c, n = 3, 32
    params = {"wr": R.randn(c, c, MODES).astype(np.float32) * 0.3,
              "wi": R.randn(c, c, MODES).astype(np.float32) * 0.3,
              "w_point": R.randn(c, c).astype(np.float32) * 0.3}
    x = R.randn(4, c, n).astype(np.float32)
    target = np.roll(x, 3, axis=-1)
    want = jax.jit(fno_step)(params, x, target)
    step = rlx_jax.jit(fno_step, backend=backend)
    assert _host_kinds(step, params, x, target) == set()      # wholly on the device
    got = step(params, x, target)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)
