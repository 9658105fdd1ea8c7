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
    # near misses: A·B merged first (another rounding), a bias added between the products
    "merged_ab": (lambda x, w, a, b: x @ w + x @ (a @ b) * 0.5, {"DotGeneral": 3, "Binary": 2}),
    "bias_between": (lambda x, w, a, b: x @ w + BIAS + (x @ a @ b) * 0.5,
                     {"DotGeneral": 3, "Binary": 3, "Expand": 1}),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_and_near_misses(form):
    fn, want = FORMS[form]
    assert recognize(rlx_jax.trace(fn, X, W, A, B)).op_counts() == want


@pytest.mark.parametrize("form", ["scale_after", "no_scale", "merged_ab"])
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
