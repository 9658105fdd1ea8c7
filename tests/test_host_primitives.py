"""JAX primitives with no RLX kind yet (linear algebra, FFTs, complex parts, host callbacks) run
as JAX on the host (OpKind.HostPrimitive) on every backend, with their gradients; with
fallback="error" they are refused as before. Oracle: JAX on CPU."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.ir.ops import OpKind as K

from .conftest import BACKENDS

R = np.random.RandomState(0)
A = R.randn(5, 5).astype(np.float32)
SPD = A @ A.T + 5 * np.eye(5, dtype=np.float32)
Y = R.randn(5).astype(np.float32)


def gp_nll(k, y):
    chol = jnp.linalg.cholesky(k + 1e-3 * jnp.eye(k.shape[0]))
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.log(jnp.diag(chol)).sum()


def _close(got, want, tol=1e-5):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_process_nll_and_its_gradient(backend):
    for fn in (gp_nll, jax.grad(gp_nll, argnums=(0, 1))):
        f = rlx_jax.jit(fn, backend=backend)
        _close(f(SPD, Y), jax.jit(fn)(SPD, Y), 1e-4)
        host = f.lower(SPD, Y).placement().host_ops()
        names = {str(n.attrs["primitive"]) for n, _ in host if n.kind is K.HostPrimitive}
        if backend == "xla":
            assert not host           # the reference runs JAX primitives itself
        else:
            assert "cholesky" in names and "triangular_solve" in names, names


@pytest.mark.parametrize("backend", BACKENDS)
def test_fft_power_spectrum_and_complex_values(backend):
    x = R.randn(64).astype(np.float32)
    spec = lambda x: jnp.abs(jnp.fft.rfft(x)) ** 2                    # noqa: E731
    _close(rlx_jax.jit(spec, backend=backend)(x), spec(x), 1e-4)
    rot = lambda x: jnp.real(x * (1 + 2j)) + jnp.imag(x * 1j)        # noqa: E731
    _close(rlx_jax.jit(rot, backend=backend)(x), rot(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_result_primitive_eigh(backend):
    def f(k):
        w, v = jnp.linalg.eigh(k)
        return w, jnp.abs(v @ v.T)                                    # orthonormal: identity
    got, want = rlx_jax.jit(f, backend=backend)(SPD), jax.jit(f)(SPD)
    _close(got, want, 1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pure_callback_runs_on_the_host(backend):
    def f(x):
        y = jax.pure_callback(lambda a: np.sort(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y * 2
    x = R.randn(7).astype(np.float32)
    _close(rlx_jax.jit(f, backend=backend)(x), np.sort(x) * 2)


def test_fallback_error_refuses_them_naming_each():
    with pytest.raises(errors.UnsupportedPrimitiveError) as info:
        rlx_jax.jit(gp_nll, backend="mlx" if "mlx" in BACKENDS else "xla",
                    fallback="error")(SPD, Y)
    msg = str(info.value)
    assert "cholesky ×1" in msg and "triangular_solve" in msg and "test_host_primitives.py" in msg
    assert "run as JAX on the host with fallback='host'" in msg


def test_the_placement_report_names_the_primitive():
    if "coreml" not in BACKENDS:
        pytest.skip("coreml is not available here")
    text = str(rlx_jax.jit(gp_nll, backend="coreml").lower(SPD, Y).placement())
    assert "HostPrimitive[primitive=cholesky" in text
    assert "the JAX primitive `cholesky` (no RLX kind yet)" in text
