"""JAX primitives with no RLX kind yet (some special functions, host callbacks) run
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

pytestmark = pytest.mark.host("JAX primitives with no RLX kind run on the host by design")

R = np.random.RandomState(0)
A = (R.rand(6).astype(np.float32) + 0.5)
X = (R.rand(6).astype(np.float32) * 3)


def incomplete_gamma(a, x):
    return jnp.sum(jax.scipy.special.gammainc(a, x) * x)


def _close(got, want, tol=1e-5):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_function_and_its_gradient(backend):
    """igamma (and, in its gradient in a, igamma_grad_a) has no RLX kind: both run on the host."""
    for fn in (incomplete_gamma, jax.grad(incomplete_gamma, argnums=(0, 1))):
        f = rlx_jax.jit(fn, backend=backend)
        _close(f(A, X), jax.jit(fn)(A, X), 1e-4)
        host = f.lower(A, X).placement().host_ops()
        names = {str(n.attrs["primitive"]) for n, _ in host if n.kind is K.HostPrimitive}
        if backend == "xla":
            assert not host           # the reference runs JAX primitives itself
        else:
            assert "igamma" in names, names
            assert fn is incomplete_gamma or "igamma_grad_a" in names, names


@pytest.mark.parametrize("backend", BACKENDS)
def test_pure_callback_runs_on_the_host(backend):
    def f(x):
        y = jax.pure_callback(lambda a: np.sort(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y * 2
    x = R.randn(7).astype(np.float32)
    _close(rlx_jax.jit(f, backend=backend)(x), np.sort(x) * 2)


def test_fallback_error_refuses_them_naming_each():
    with pytest.raises(errors.UnsupportedPrimitiveError) as info:
        rlx_jax.jit(jax.grad(incomplete_gamma), backend="mlx" if "mlx" in BACKENDS else "xla",
                    fallback="error")(A, X)
    msg = str(info.value)
    assert "igamma ×1" in msg and "igamma_grad_a" in msg and "test_host_primitives.py" in msg
    assert "run as JAX on the host with fallback='host'" in msg


def test_the_placement_report_names_the_primitive():
    if "coreml" not in BACKENDS:
        pytest.skip("coreml is not available here")
    text = str(rlx_jax.jit(incomplete_gamma, backend="coreml").lower(A, X).placement())
    assert "HostPrimitive[primitive=igamma" in text
    assert "the JAX primitive `igamma` (no RLX kind yet)" in text
