"""LoRA layers recognised as LoraMatMul (passes/pattern_refs.py): the forms that become one node
and the near misses that stay primitives (exact op counts), a LoRA fine-tuning step whose
gradients for A and B equal jax.grad's and finite differences, on every backend."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.passes.recognize import recognize

R = np.random.RandomState(0)
W = R.randn(16, 24).astype(np.float32) * 0.2
A = R.randn(16, 4).astype(np.float32) * 0.2
B = R.randn(4, 24).astype(np.float32) * 0.2
BIAS = R.randn(24).astype(np.float32)
X = R.randn(2, 5, 16).astype(np.float32)

FORMS = {                      # form -> (function of x, w, a, b; the op counts it becomes)
    "scale_after": (lambda x, w, a, b: x @ w + (x @ a @ b) * 0.5, {"LoraMatMul": 1}),
    "scale_before": (lambda x, w, a, b: x @ w + 0.5 * (x @ a @ b), {"LoraMatMul": 1}),
    "no_scale": (lambda x, w, a, b: x @ w + x @ a @ b, {"LoraMatMul": 1}),
    "rank_2": (lambda x, w, a, b: x[0] @ w + (x[0] @ a @ b) * 2.0,
               {"DotGeneral": 3, "Binary": 2, "Slice": 2, "Reshape": 2}),   # x[0] taken twice
    # a bias (the dense layer's) before or after the low-rank product: added to the node
    "bias": (lambda x, w, a, b: x @ w + BIAS + (x @ a @ b) * 0.5,
             {"LoraMatMul": 1, "Binary": 1, "Expand": 1}),
    "bias_last": (lambda x, w, a, b: x @ w + (x @ a @ b) * 0.5 + BIAS,
                  {"LoraMatMul": 1, "Binary": 1, "Expand": 1}),
    # near misses: A·B merged first (another rounding), the bias inside the low-rank branch
    "merged_ab": (lambda x, w, a, b: x @ w + x @ (a @ b) * 0.5, {"DotGeneral": 3, "Binary": 2}),
    "bias_in_branch": (lambda x, w, a, b: x @ w + (x @ a @ b + BIAS) * 0.5,
                       {"DotGeneral": 3, "Binary": 3, "Expand": 1}),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_and_near_misses(form):
    fn, want = FORMS[form]
    assert recognize(rlx_jax.trace(fn, X, W, A, B)).op_counts() == want


@pytest.mark.parametrize("form", ["scale_after", "no_scale", "bias", "merged_ab"])
def test_forms_equal_jax(form, backend):
    fn = FORMS[form][0]
    jf = rlx_jax.jit(fn, backend=backend)
    assert (jf.lower(X, W, A, B).op_counts().get("LoraMatMul") == 1) == (
        form != "merged_ab" and backend != "xla")      # xla decomposes it
    np.testing.assert_allclose(jf(X, W, A, B), jax.jit(fn)(X, W, A, B), rtol=1e-5, atol=1e-5)


def _loss(ab, x, w):
    return jnp.mean(jnp.tanh(x @ w + (x @ ab["a"] @ ab["b"]) * 0.5) ** 2)


def test_fine_tuning_step_trains_only_a_and_b(backend):
    """value_and_grad with respect to A and B alone (W frozen): LoraMatMul in the program (the
    backward stays primitives), gradients equal jax.grad's and float32 central differences
    (rlx_jax.testing.check_grads)."""
    step = jax.value_and_grad(_loss)
    jf = rlx_jax.jit(step, backend=backend)
    ab = {"a": A, "b": B}
    assert (jf.lower(ab, X, W).op_counts().get("LoraMatMul") == 1) == (backend != "xla")
    (loss, grads), (want_loss, want) = jf(ab, X, W), jax.jit(step)(ab, X, W)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for k in ab:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-4, atol=1e-6)
    # and rlx_jax's gradient of the same step against float32 central differences
    rlx_jax.testing.check_grads(lambda ab: _loss(ab, X, W), (ab,), backend=backend)


def test_flax_dense_plus_lora_fine_tuning(backend):
    """flax nn.Dense (its bias added through a reshape) + a LoRA branch, the dense layer frozen:
    LoraMatMul plus the bias in the forward, the step equal to jax.jit's."""
    import flax.linen as nn

    class LoraDense(nn.Module):
        @nn.compact
        def __call__(self, x):
            a = self.param("a", nn.initializers.normal(0.2), (x.shape[-1], 4))
            b = self.param("b", nn.initializers.normal(0.2), (4, 24))
            return nn.Dense(24)(x) + (x @ a @ b) * 2.0

    model = LoraDense()
    params = model.init(jax.random.PRNGKey(0), X)["params"]
    frozen = {"Dense_0": params["Dense_0"]}
    lora = {"a": params["a"], "b": params["b"]}

    def loss(lora, x):
        return jnp.mean(model.apply({"params": {**frozen, **lora}}, x) ** 2)
    step = jax.value_and_grad(loss)
    assert recognize(rlx_jax.trace(model.apply, {"params": params}, X)).op_counts() == \
        {"LoraMatMul": 1, "Binary": 1, "Expand": 1}
    jf = rlx_jax.jit(step, backend=backend)
    assert (jf.lower(lora, X).op_counts().get("LoraMatMul") == 1) == (backend != "xla")
    (value, grads), (want_value, want) = jf(lora, X), jax.jit(step)(lora, X)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for k in lora:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-4, atol=1e-6)
