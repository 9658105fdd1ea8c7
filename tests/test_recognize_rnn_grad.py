"""flax's recurrent cells in a training step (passes/recognize_rnn.py, passes/rnn_residuals.py):
under jax.value_and_grad the forward Scan, which also yields the residuals JAX's autodiff keeps
for the backward, becomes one Lstm / Gru / Rnn node with the residuals recomputed in parallel
over time from its outputs; the backward stays JAX's transposed Scan. Values and gradients
against jax.value_and_grad on every backend, the op counts, the Lstm's residual outputs (its
gates' pre-activations, its cell states: the body's residuals without a matmul), the parallel
prefix of the cell states, and the near misses that stay a Scan."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.passes.recognize import recognize
from rlx_jax.testing import assert_ran_on_device
from rlx_jax.ir.reference_rnn import lstm, lstm_gates, prefix_linear
from rlx_jax.passes.rnn_residuals import lstm_residual_graph

from .test_recognize_rnn import (CELL_PARAMS, GRAD_CELLS, LABELS, XT, B, Classifier, H, I, X,
                                 init_params, random_biases)

KINDS = {"lstm": ("Lstm", "lstm"), "gru": ("Gru", "gru"), "simple": ("Rnn", "rnn")}


def _loss(model):
    def loss(params, x, labels):
        logp = jax.nn.log_softmax(model.apply(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))
    return loss


def _assert_equal(got, want):
    """value_and_grad's (value, gradients) against jax's: value to 1e-5, gradients to 1e-4."""
    (value, grads), (want_value, want_grads) = got, want
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-6)
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cell", sorted(GRAD_CELLS))
def test_training_step_forward_is_the_kind(cell, backend):
    """value_and_grad w.r.t. the params: one kind (the forward) and one Scan (the backward) on
    mlx and coreml, the two Scans again on xla (it decomposes the kind). The weights are the
    program's arguments, which MIL's recurrent ops do not take: Core ML builds the kind's
    decomposition, a while_loop beside the backward's. Value and gradients equal jax's."""
    kind, mil_op = KINDS[cell]
    model = Classifier(GRAD_CELLS[cell])
    params = random_biases(init_params(model), 4)
    step = jax.value_and_grad(_loss(model))
    jf = rlx_jax.jit(step, backend=backend)
    lowered = jf.lower(params, X, LABELS)
    counts = lowered.op_counts()
    native = backend != "xla"
    assert (counts.get(kind), counts.get("Scan")) == ((1, 1) if native else (None, 2)), counts
    if backend == "coreml":
        mil = lowered.op_counts(level="backend")
        assert mil_op not in mil and mil.get("while_loop") == 2, mil
    _assert_equal(jf(params, X, LABELS), jax.jit(step)(params, X, LABELS))


@pytest.mark.parametrize("cell", sorted(GRAD_CELLS))
def test_input_gradient_runs_one_mil_op(cell, backend):
    """The weights closed over, the gradient w.r.t. x: on Core ML the forward is ONE MIL lstm /
    gru / rnn op (the GRU's h-side candidate bias zero, as MIL's gru takes it) and the backward
    the one while_loop; values and gradients equal jax's."""
    kind, mil_op = KINDS[cell]
    model = Classifier(GRAD_CELLS[cell])
    params = random_biases(init_params(model), 6, zero_hn=True)
    step = jax.value_and_grad(lambda x, labels: _loss(model)(params, x, labels))
    jf = rlx_jax.jit(step, backend=backend)
    lowered = jf.lower(X, LABELS)
    assert (lowered.op_counts().get(kind) == 1) == (backend != "xla"), lowered.op_counts()
    if backend == "coreml":
        mil = lowered.op_counts(level="backend")
        assert mil.get(mil_op) == 1 and mil.get("while_loop") == 1, mil
    _assert_equal(jf(X, LABELS), jax.jit(step)(X, LABELS))


def _lax_scan_loss(params, x):
    """lax.scan over LSTMCell.apply (time-major x), the loss of every step's h."""
    cell = nn.LSTMCell(H)
    zeros = jnp.zeros((x.shape[1], H), x.dtype)
    _, hs = jax.lax.scan(lambda carry, xt: cell.apply(params, carry, xt), (zeros, zeros), x)
    return jnp.sum(jnp.tanh(hs))


class ScanCell(nn.Module):
    """flax nn.scan over a cell class (time-major x), its every h summed."""
    cell: type

    @nn.compact
    def __call__(self, x):
        scan = nn.scan(self.cell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=0, out_axes=0)
        cell = scan(H)
        _, hs = cell(cell.initialize_carry(jax.random.PRNGKey(1), x[0].shape), x)
        return jnp.sum(hs * hs)


def _scan_form(cell):
    model = ScanCell(cell)
    return model.apply, (random_biases(model.init(jax.random.PRNGKey(0), XT), 7), XT)


def _classifier_form(cell):
    model = Classifier(cell)
    return _loss(model), (random_biases(init_params(model), 7), X, LABELS)


GRAD_FORMS = {      # form -> (loss, its arguments, the kind, recognised)
    "lax_scan": (_lax_scan_loss, (CELL_PARAMS, XT), "Lstm", True),
    "nn_scan": _scan_form(nn.LSTMCell) + ("Lstm", True),
    "optimized_lstm": _scan_form(nn.OptimizedLSTMCell) + ("Lstm", True),
    "mgu": _scan_form(nn.MGUCell) + ("Gru", True),
    # near misses: another activation, another gate function
    "gru_relu": _classifier_form(nn.GRUCell(H, activation_fn=nn.relu)) + ("Gru", False),
    "hard_sigmoid_gates": _classifier_form(nn.LSTMCell(H, gate_fn=nn.hard_sigmoid))
    + ("Lstm", False),
}


@pytest.mark.parametrize("form", sorted(GRAD_FORMS))
def test_forms_and_near_misses_under_grad(form):
    """The other forms under value_and_grad: the forward Scan becomes the kind, the backward
    stays (exact counts); another cell formula keeps both Scans and no recurrent kind."""
    loss, args, kind, replaced = GRAD_FORMS[form]
    graph = rlx_jax.trace(jax.value_and_grad(loss), *args)
    plain = recognize(graph, patterns=False).op_counts()
    counts = recognize(graph).op_counts()
    assert plain.get("Scan") == 2 and kind not in plain, plain
    if replaced:
        assert (counts.get(kind), counts.get("Scan")) == (1, 1), counts
    else:
        assert counts.get("Scan") == 2 and not {"Lstm", "Gru", "Rnn"} & set(counts), counts


@pytest.mark.parametrize("form", ["lax_scan", "mgu", "optimized_lstm"])
def test_forms_under_grad_equal_jax(form):
    """lax.scan over LSTMCell.apply, nn.scan over MGUCell and over OptimizedLSTMCell (its
    kernels concatenated outside the step by JAX's partial evaluation): the kind on mlx,
    value and gradients equal jax's."""
    loss, args, kind, _ = GRAD_FORMS[form]
    step = jax.value_and_grad(loss)
    jf = rlx_jax.jit(step, backend="mlx")
    lowered = jf.lower(*args)
    assert lowered.op_counts().get(kind) == 1
    assert_ran_on_device(lowered.compile())             # mx.compile'd, no host segment
    _assert_equal(jf(*args), jax.jit(step)(*args))


def test_a_residual_of_another_scanned_input_stays_a_scan():
    """A lax.scan over the cell whose step also reads a second scanned input (a per-step
    scale of h): its residuals are not functions of the carry, x and the weights alone, so
    the Scan is not the cell's and stays, forward and backward."""
    cell = nn.LSTMCell(H)
    scale = np.linspace(0.5, 1.5, XT.shape[0] * B * H, dtype=np.float32).reshape(-1, B, H)

    def loss(params, x):
        def step(carry, xs):
            carry, h = cell.apply(params, carry, xs[0])
            return carry, jnp.tanh(h * xs[1])
        zeros = jnp.zeros((x.shape[1], H), x.dtype)
        return jnp.sum(jax.lax.scan(step, (zeros, zeros), (x, scale))[1])
    graph = rlx_jax.trace(jax.value_and_grad(loss), CELL_PARAMS, XT)
    counts = recognize(graph).op_counts()
    assert counts.get("Scan") == 2 and "Lstm" not in counts, counts


def test_a_step_with_a_host_callback_stays_a_scan():
    """jax.debug.callback in the step: recomputing the residuals would run the callback again
    (and a host operation is not recomputed over time), so the forward Scan stays."""
    cell = nn.LSTMCell(H)

    def loss(params, x):
        def step(carry, xt):
            carry, h = cell.apply(params, carry, xt)
            jax.debug.callback(lambda a: None, h)
            return carry, h
        zeros = jnp.zeros((x.shape[1], H), x.dtype)
        return jnp.sum(jax.lax.scan(step, (zeros, zeros), x)[1] ** 2)
    counts = recognize(rlx_jax.trace(jax.value_and_grad(loss), CELL_PARAMS, XT)).op_counts()
    assert counts.get("Scan") == 2 and "Lstm" not in counts, counts


@pytest.mark.parametrize("steps", [0, 1, 5, 17])
def test_the_parallel_prefix_equals_the_recurrence(steps):
    """The cell states' linear recurrence y_t = a_t·y_{t-1} + u_t solved by the parallel
    prefix (passes/rnn_residuals.py) equals the step-by-step loop on random coefficients, an
    empty sequence included."""
    r = np.random.RandomState(8)
    a = r.uniform(0, 1, (steps, B, H)).astype(np.float32)
    u = (r.randn(steps, B, H) * 0.5).astype(np.float32)
    want, y = [], np.zeros((B, H), np.float32)
    for t in range(steps):
        y = a[t] * y + u[t]
        want.append(y)
    got = np.asarray(prefix_linear(jnp.asarray(a), jnp.asarray(u)))
    assert got.shape == (steps, B, H)
    np.testing.assert_allclose(got, np.reshape(want, (steps, B, H)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", ["lax_scan", "optimized_lstm"])
def test_the_lstm_residuals_take_the_gates_from_the_node(form):
    """Under grad the Lstm yields its gates' pre-activations and cell states (attribute
    residuals, 5 outputs); the body's residuals are computed from them without a matmul
    (the four pre-activations are inputs of `lstm_residual_graph`, LSTMCell's per-gate
    kernels and OptimizedLSTMCell's concatenated ones alike)."""
    loss, args, _, _ = GRAD_FORMS[form]
    graph = rlx_jax.trace(jax.value_and_grad(loss), *args)
    scan = next(n for n in graph.walk() if n.kind.name == "Scan" and not n.attrs["reverse"])
    nc, nk = scan.attrs["num_consts"], scan.attrs["num_carry"]
    rest = lstm_residual_graph(scan.regions[0], nc, nk)
    assert "DotGeneral" not in rest.op_counts(), rest.op_counts()
    assert len(rest.inputs) == len(scan.regions[0].inputs) + 4
    node = next(n for n in recognize(graph).walk() if n.kind.name == "Lstm")
    assert node.attrs == {"residuals": True} and len(node.outputs) == 5
    assert [v.shape for v in node.outputs[3:]] == [(XT.shape[0], B, 4 * H), (XT.shape[0], B, H)]


@pytest.mark.parametrize("steps", [0, 1, 9])
def test_the_lstm_gates_from_hs_equal_the_recurrence(steps):
    """`lstm_gates` (every step's z and c from hs: one matmul, the parallel prefix; Core ML's
    path after its lstm op) equals the residual outputs of the Lstm's recurrence."""
    r = np.random.RandomState(3)
    x = r.randn(steps, B, I).astype(np.float32)
    c0, h0 = (r.randn(B, H).astype(np.float32) for _ in range(2))
    w_ih, w_hh = (r.randn(4 * H, n).astype(np.float32) * 0.3 for n in (I, H))
    b = r.randn(4 * H).astype(np.float32) * 0.3
    hs, _, _, zs, cs = lstm(x, c0, h0, w_ih, w_hh, b, residuals=True)
    for got, want in zip(lstm_gates(x, c0, h0, w_ih, w_hh, b, hs), (zs, cs)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
