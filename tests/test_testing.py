"""rlx_jax.testing.check_grads: passes on right gradients, names the argument and the error
on wrong ones (against jax.grad, and against finite differences)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import nn
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.decompose import DECOMPS

R = np.random.RandomState(0)
PARAMS = {"x": R.randn(3, 8).astype(np.float32), "g": (1 + 0.1 * R.randn(8)).astype(np.float32)}
LABELS = np.array([1, 0, 5], np.int32)


def loss(p, labels):
    h = nn.rms_norm(nn.gelu(p["x"]), p["g"])
    return nn.softmax_cross_entropy_with_logits(h, labels).mean()


def test_passes_on_correct_gradients():
    assert rlx_jax.testing.check_grads(loss, (PARAMS, LABELS), backend="xla") is None


def test_second_order():
    rlx_jax.testing.check_grads(lambda p: jnp.sum(nn.rms_norm(p["x"], p["g"]) ** 3), (PARAMS,),
                                backend="xla", order=2)


def test_non_scalar_output_is_projected():
    rlx_jax.testing.check_grads(lambda x: nn.silu(x), (PARAMS["x"],), backend="xla")


def test_names_the_argument_whose_gradient_differs_from_jax(monkeypatch):
    right = DECOMPS[K.RmsNormBackwardGamma]

    def off_by_two(b, node, *operands):
        return b.binary("mul", right(b, node, *operands), b.scalar(2, operands[0]))
    monkeypatch.setitem(DECOMPS, K.RmsNormBackwardGamma, off_by_two)
    with pytest.raises(AssertionError,
                       match=r"gradient of args\[0\]\['g'\] differs from jax.grad: max abs error"):
        rlx_jax.testing.check_grads(loss, (PARAMS, LABELS), backend="xla")


def test_finite_differences_catch_a_wrong_derivative_rule():
    @jax.custom_jvp
    def bad_sin(x):
        return jnp.sin(x)
    bad_sin.defjvp(lambda primals, tangents: (jnp.sin(primals[0]),
                                              jnp.sin(primals[0]) * tangents[0]))
    with pytest.raises(AssertionError, match="central finite differences"):
        rlx_jax.testing.check_grads(lambda x: jnp.sum(bad_sin(x)), (PARAMS["x"],),
                                    backend="xla")


def test_requires_a_float_argument():
    with pytest.raises(ValueError, match="no floating-point"):
        rlx_jax.testing.check_grads(lambda t: jnp.sum(t), (LABELS,), backend="xla")
