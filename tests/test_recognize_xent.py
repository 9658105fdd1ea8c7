"""optax.softmax_cross_entropy with probability labels recognised as SoftmaxCrossEntropy and
its gradient w.r.t. the logits as SoftmaxCrossEntropyDenseBackward (passes/pattern_xent.py):
the forms that become one node and the near misses that stay primitives (exact op counts),
values and gradients equal jax.jit and jax.grad (and finite differences) on every backend,
large logits as stable as optax's, the Core ML MIL op counts recognised and not."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlx_jax
from rlx_jax.passes.recognize import recognize

R = np.random.RandomState(0)
C = 10
LOGITS = R.randn(6, C).astype(np.float32) * 3
LABELS = np.asarray(jax.nn.softmax(R.randn(6, C) * 2), np.float32)     # rows sum to 1
LOGITS3 = R.randn(2, 3, C).astype(np.float32) * 3
LABELS3 = R.uniform(0, 1, (2, 3, C)).astype(np.float32)                 # rows sum to anything
SCE, SCE_DX = {"SoftmaxCrossEntropy": 1}, {"SoftmaxCrossEntropyDenseBackward": 1}
MEAN_GRAD = {"Expand": 1, "Binary": 1}                                   # its cotangent 1 / N


def xent(logits, labels):
    return optax.softmax_cross_entropy(logits, labels)


def mean_xent(logits, labels):
    return jnp.mean(xent(logits, labels))


def both_grads(logits, labels):
    return jax.grad(mean_xent, argnums=(0, 1))(logits, labels)


FORMS = {                   # form -> (function, the op counts its recognised graph has)
    "optax": (xent, SCE),
    "hand_written": (lambda l, y: -jnp.sum(y * jax.nn.log_softmax(l), axis=-1), SCE),
    "smoothed_labels": (lambda l, y: xent(l, optax.smooth_labels(y, 0.1)), {**SCE, "Binary": 2}),
    "one_row": (lambda l, y: xent(l[0], y[0]), {**SCE, "Slice": 2, "Reshape": 2}),
    "grad": (jax.grad(mean_xent), {**SCE_DX, **MEAN_GRAD}),
    "value_and_grad": (jax.value_and_grad(mean_xent),
                       {**SCE, **SCE_DX, "Reduce": 1, "Binary": 2, "Expand": 1}),
    # d labels = -dloss * log_softmax(logits): a LogSoftmax (its own pattern) and a product
    "grad_of_labels_too": (both_grads, {**SCE_DX, "LogSoftmax": 1, "Activation": 1,
                                        "Binary": 2, "Expand": 2}),
    # near misses: the sum over another axis, log(softmax), optax's axis=0, labels broadcast,
    # optax's where mask, log_softmax over another axis than the sum
    "sum_axis_0": (lambda l, y: -jnp.sum(y * jax.nn.log_softmax(l), axis=0),
                   {"LogSoftmax": 1, "Binary": 1, "Reduce": 1, "Activation": 1}),
    "log_of_softmax": (lambda l, y: -jnp.sum(y * jnp.log(jax.nn.softmax(l)), axis=-1),
                       {"Softmax": 1, "Activation": 2, "Binary": 1, "Reduce": 1}),
    "optax_axis_0": (lambda l, y: optax.softmax_cross_entropy(l, y, axis=0),
                     {"Activation": 3, "Binary": 4, "Expand": 2, "Reduce": 3}),
    "labels_broadcast": (lambda l, y: xent(l, y[0]),
                         {"LogSoftmax": 1, "Activation": 1, "Binary": 1, "Expand": 1,
                          "Reduce": 1, "Reshape": 1, "Slice": 1}),
    "log_softmax_axis_0": (lambda l, y: -jnp.sum(y * jax.nn.log_softmax(l, axis=0), -1),
                           {"Activation": 3, "Binary": 4, "Expand": 2, "Reduce": 3}),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_and_near_misses(form):
    fn, want = FORMS[form]
    assert recognize(rlx_jax.trace(fn, LOGITS, LABELS)).op_counts() == want


def test_where_mask_is_left_alone():
    got = recognize(rlx_jax.trace(
        lambda l, y: optax.softmax_cross_entropy(l, y, where=y[:, 0] > 0.05), LOGITS, LABELS))
    assert not {"SoftmaxCrossEntropy", "LogSoftmax"} & set(got.op_counts())


def test_leading_axes_and_any_label_mass():
    """logits[2, 3, C] (no reshape: the kinds take any leading axes), labels not normalised."""
    fn = jax.value_and_grad(lambda l, y: jnp.sum(xent(l, y)))
    counts = recognize(rlx_jax.trace(fn, LOGITS3, LABELS3)).op_counts()
    assert counts == {**SCE, **SCE_DX, "Reduce": 1, "Expand": 1}


def _np(t):
    return jax.tree.map(np.asarray, t)


@pytest.mark.parametrize("form", ["optax", "value_and_grad", "grad_of_labels_too",
                                  "log_of_softmax"])
def test_forms_equal_jax(form, backend):
    fn = FORMS[form][0]
    jf = rlx_jax.jit(fn, backend=backend)
    kinds = set(jf.lower(LOGITS, LABELS).op_counts())
    recognised = form != "log_of_softmax" and backend != "xla"          # xla decomposes them
    assert bool(kinds & {"SoftmaxCrossEntropy", "SoftmaxCrossEntropyDenseBackward"}) == \
        recognised
    got, want = _np(jf(LOGITS, LABELS)), jax.jit(fn)(LOGITS, LABELS)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6),
                 got, want)


def test_leading_axes_value_and_grad_equal_jax(backend):
    fn = jax.value_and_grad(lambda l, y: jnp.sum(xent(l, y) ** 2))
    (loss, g), (want_loss, want) = _np(rlx_jax.jit(fn, backend=backend)(LOGITS3, LABELS3)), \
        jax.jit(fn)(LOGITS3, LABELS3)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_large_logits_stay_finite_as_optax(backend):
    """Logits of ±1e4 (exp overflows without the max subtraction): the loss and gradient are
    finite and equal optax's."""
    big = LOGITS * 3e3
    fn = jax.value_and_grad(mean_xent)
    (loss, g), (want_loss, want) = _np(rlx_jax.jit(fn, backend=backend)(big, LABELS)), \
        jax.jit(fn)(big, LABELS)
    assert np.isfinite(loss) and np.isfinite(g).all()
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_gradient_equals_finite_differences(backend):
    """rlx_jax's gradient of a loss through both kinds against float32 central differences."""
    rlx_jax.testing.check_grads(lambda l: mean_xent(l, LABELS) ** 2, (LOGITS,),
                                backend=backend)


def test_core_ml_mil_ops_recognised_and_not():
    """Given: the optax loss and its value_and_grad on coreml, recognised and not
       Result: the loss 8 MIL ops (reduce_max, sub, exp, reduce_sum, log, sub, mul,
               reduce_sum) against 19 (log_softmax's -inf guard, its stop_gradient's copies);
               value_and_grad 20 against 38"""
    def counts(fn, recognize):
        return rlx_jax.jit(fn, backend="coreml", recognize=recognize,  # recognition alone
                           fold_constants=False).lower(
            LOGITS, LABELS).op_counts("backend")
    fwd = {"reduce_max": 1, "sub": 2, "exp": 1, "reduce_sum": 2, "log": 1, "mul": 1}
    assert counts(xent, True) == fwd
    assert sum(counts(xent, False).values()) == 19
    vg = jax.value_and_grad(mean_xent)
    assert sum(counts(vg, True).values()) == 20
    assert sum(counts(vg, False).values()) == 38
