"""flax's recurrent cells under a scan recognised as one node (passes/recognize_rnn.py): LSTMCell
as Lstm, GRUCell as Gru, SimpleCell as Rnn; the forms that become the kind and the near misses
that stay a Scan (exact op counts), a classifier's forward on every backend against jax.jit
(one MIL lstm / gru / rnn op on Core ML with the weights closed over) and the MIL executor's
recurrent ops against the kinds' references (training steps: test_recognize_rnn_grad.py)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir.reference_rnn import gru, lstm, rnn
from rlx_jax.passes.recognize import recognize

B, T, I, H, C = 2, 6, 5, 8, 3
R = np.random.RandomState(0)
X = R.randn(B, T, I).astype(np.float32)
LABELS = np.array([0, 2], np.int32)
LENGTHS = np.array([3, T], np.int32)


class Classifier(nn.Module):
    """dense input -> nn.RNN(cell) -> the last hidden state -> dense logits."""
    cell: nn.Module

    @nn.compact
    def __call__(self, x):
        hs = nn.RNN(self.cell)(nn.Dense(I)(x))
        return nn.Dense(C)(hs[:, -1])


def init_params(model):
    return model.init(jax.random.PRNGKey(0), X)


def _counts(fn, *args):
    return recognize(rlx_jax.trace(fn, *args)).op_counts()


class ScanLstm(nn.Module):
    """flax nn.scan over the cell (time-major input), the carry from initialize_carry."""

    @nn.compact
    def __call__(self, x):
        scan = nn.scan(nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=0, out_axes=0)
        cell = scan(H)
        carry = cell.initialize_carry(jax.random.PRNGKey(1), x[0].shape)
        return cell(carry, x)


def _lax_scan_over_cell(x, params):
    """lax.scan over flax's LSTMCell.apply with the params closed over, time-major x."""
    cell = nn.LSTMCell(H)

    def step(carry, xt):
        return cell.apply(params, carry, xt)
    zeros = jnp.zeros((x.shape[1], H), x.dtype)
    return jax.lax.scan(step, (zeros, zeros), x)


CELL_PARAMS = nn.LSTMCell(H).init(jax.random.PRNGKey(2), (np.zeros((B, H), np.float32),) * 2,
                                  X[:, 0])
XT = np.swapaxes(X, 0, 1)

FORMS = {              # form -> (function, arguments, is the Scan replaced by one Lstm)
    "nn_rnn": (Classifier(nn.LSTMCell(H)).apply, (init_params(Classifier(nn.LSTMCell(H))), X),
               True),
    "nn_rnn_reverse": (lambda p, x: nn.RNN(nn.LSTMCell(H), reverse=True).apply(p, x),
                       (nn.RNN(nn.LSTMCell(H)).init(jax.random.PRNGKey(0), X), X), True),
    "nn_scan": (ScanLstm().apply, (ScanLstm().init(jax.random.PRNGKey(0), XT), XT), True),
    "lax_scan": (lambda x: _lax_scan_over_cell(x, CELL_PARAMS), (XT,), True),
    "gru": (Classifier(nn.GRUCell(H)).apply, (init_params(Classifier(nn.GRUCell(H))), X), True),
    "simple": (Classifier(nn.SimpleCell(H)).apply, (init_params(Classifier(nn.SimpleCell(H))), X),
               True),
    "nn_rnn_seq_lengths": (lambda p, x: nn.RNN(nn.LSTMCell(H)).apply(p, x,
                                                                      seq_lengths=LENGTHS),
                           (nn.RNN(nn.LSTMCell(H)).init(jax.random.PRNGKey(0), X), X), True),
    "optimized_lstm": (Classifier(nn.OptimizedLSTMCell(H)).apply,
                       (init_params(Classifier(nn.OptimizedLSTMCell(H))), X), True),
    # MGUCell: the GRU formula with one gate as reset and update (a Gru, r and z blocks equal)
    "mgu": (Classifier(nn.MGUCell(H)).apply, (init_params(Classifier(nn.MGUCell(H))), X), True),
    # near misses: another activation, another gate function, a residual SimpleCell
    "gru_relu": (Classifier(nn.GRUCell(H, activation_fn=nn.relu)).apply,
                 (init_params(Classifier(nn.GRUCell(H))), X), False),
    "simple_residual": (Classifier(nn.SimpleCell(H, residual=True)).apply,
                        (init_params(Classifier(nn.SimpleCell(H))), X), False),
    "relu_cell": (Classifier(nn.LSTMCell(H, activation_fn=nn.relu)).apply,
                  (init_params(Classifier(nn.LSTMCell(H))), X), False),
    "hard_sigmoid_gates": (Classifier(nn.LSTMCell(H, gate_fn=nn.hard_sigmoid)).apply,
                           (init_params(Classifier(nn.LSTMCell(H))), X), False),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_and_near_misses(form):
    fn, args, replaced = FORMS[form]
    counts = _counts(fn, *args)
    plain = recognize(rlx_jax.trace(fn, *args), patterns=False).op_counts()
    assert plain.get("Scan") == 1 and "Lstm" not in plain
    kinds = {k: v for k, v in counts.items() if k in ("Lstm", "Gru", "Rnn")}
    if replaced:
        assert list(kinds.values()) == [1] and "Scan" not in counts, counts
    else:
        assert counts == plain, counts


class Stacked(nn.Module):
    """nn.Bidirectional (an LSTM forward, a GRU over the flipped sequence) under a SimpleCell
    RNN: three Scans, three kinds."""

    @nn.compact
    def __call__(self, x):
        y = nn.Bidirectional(nn.RNN(nn.LSTMCell(H)), nn.RNN(nn.GRUCell(H)))(x)
        return nn.RNN(nn.SimpleCell(H))(y)


def test_bidirectional_and_stacked_cells_each_one_kind():
    model = Stacked()
    params = model.init(jax.random.PRNGKey(0), X)
    counts = _counts(model.apply, params, X)
    assert {k: counts.get(k) for k in ("Lstm", "Gru", "Rnn", "Scan")} == \
        {"Lstm": 1, "Gru": 1, "Rnn": 1, "Scan": None}, counts


def test_a_cell_without_a_batch_axis_stays_a_scan():
    """x[T, I] and a carry [H]: the kinds (and MIL's ops) take one batch axis."""
    model = nn.RNN(nn.LSTMCell(H))
    params = model.init(jax.random.PRNGKey(0), X[0])
    counts = _counts(model.apply, params, X[0])
    assert counts.get("Scan") == 1 and "Lstm" not in counts, counts


MODEL = Classifier(nn.LSTMCell(H))
PARAMS = init_params(MODEL)


def _infer(x):
    return MODEL.apply(PARAMS, x)


def test_classifier_forward_equals_jax(backend):
    """The weights closed over (an inference program): Lstm kept by mlx and coreml (xla
    decomposes it into its Scan); Core ML holds exactly one MIL lstm op and no while_loop."""
    jf = rlx_jax.jit(_infer, backend=backend)
    lowered = jf.lower(X)
    assert ("Lstm" in lowered.op_counts()) == (backend != "xla"), lowered.op_counts()
    if backend == "coreml":
        mil = lowered.op_counts(level="backend")
        assert mil.get("lstm") == 1 and "while_loop" not in mil, mil
    np.testing.assert_allclose(jf(X), jax.jit(_infer)(X), rtol=1e-5, atol=1e-5)


def test_classifier_weights_as_arguments(backend):
    """The weights are the program's arguments: still one Lstm; Core ML's lstm op takes
    constant weights only, so there the kind's decomposition is built (one while_loop)."""
    jf = rlx_jax.jit(MODEL.apply, backend=backend)
    lowered = jf.lower(PARAMS, X)
    assert ("Lstm" in lowered.op_counts()) == (backend != "xla")
    if backend == "coreml":
        mil = lowered.op_counts(level="backend")
        assert "lstm" not in mil and mil.get("while_loop") == 1, mil
    np.testing.assert_allclose(jf(PARAMS, X), jax.jit(MODEL.apply)(PARAMS, X), rtol=1e-5,
                               atol=1e-5)


def random_biases(params, seed, zero_hn=False):
    """`params` with every bias random (flax initialises them to zeros); the GRU's h-side
    candidate bias `hn` kept zero with zero_hn."""
    r = np.random.RandomState(seed)

    def leaf(path, a):
        names = [getattr(k, "key", "") for k in path]
        if names[-1] != "bias" or (zero_hn and "hn" in names):
            return a
        return r.uniform(-0.5, 0.5, a.shape).astype(np.float32)
    return jax.tree_util.tree_map_with_path(leaf, params)


CELLS = {      # name -> (cell, the kind, the MIL op: one, where the weights are constants)
    "gru": (nn.GRUCell(H), "Gru", "gru"),
    "gru_hn_bias": (nn.GRUCell(H), "Gru", None),       # MIL's gru adds b_hn outside r·(...)
    "simple": (nn.SimpleCell(H), "Rnn", "rnn"),
    "mgu": (nn.MGUCell(H), "Gru", None),
    "optimized_lstm": (nn.OptimizedLSTMCell(H), "Lstm", "lstm"),
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_other_cells_forward_equal_jax(name, backend):
    cell, kind, mil_op = CELLS[name]
    model = Classifier(cell)
    params = random_biases(init_params(model), 3, zero_hn=name == "gru")
    fn = jax.jit(lambda x: model.apply(params, x))
    jf = rlx_jax.jit(lambda x: model.apply(params, x), backend=backend)
    lowered = jf.lower(X)
    assert (lowered.op_counts().get(kind) == 1) == (backend != "xla"), lowered.op_counts()
    if backend == "coreml":
        mil = lowered.op_counts(level="backend")
        want = {mil_op: 1} if mil_op else {"while_loop": 1}
        assert {k: mil.get(k) for k in want} == want and ("while_loop" in mil) != bool(mil_op)
    np.testing.assert_allclose(jf(X), fn(X), rtol=1e-5, atol=1e-5)


GRAD_CELLS = {"lstm": nn.LSTMCell(H), "gru": nn.GRUCell(H), "simple": nn.SimpleCell(H)}


def test_mil_executor_lstm_equals_reference():
    """The executor's MIL lstm (coremltools' spec, gate rows i, f, o, z) against the Lstm
    kind's reference on random operands; what the spec leaves open is refused by name."""
    from rlx_jax.backends.coreml.executor.ops import OVERRIDES
    from rlx_jax.errors import LoweringError
    r = np.random.RandomState(1)
    x, c, h = r.randn(T, B, I), r.randn(B, H), r.randn(B, H)
    w_ih, w_hh, b = r.randn(4 * H, I) * 0.3, r.randn(4 * H, H) * 0.3, r.randn(4 * H)
    args = [np.asarray(v, np.float32) for v in (x, c, h, w_ih, w_hh, b)]
    hs, c_t, h_t = lstm(*args)
    seq, got_h, got_c = OVERRIDES["lstm"](x=args[0], initial_c=args[1], initial_h=args[2],
                                          weight_ih=args[3], weight_hh=args[4], bias=args[5],
                                          output_sequence=True)
    for g, w in ((seq, hs), (got_h, h_t), (got_c, c_t)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    last, _, _ = OVERRIDES["lstm"](x=args[0], initial_c=args[1], initial_h=args[2],
                                   weight_ih=args[3], weight_hh=args[4])
    assert last.shape == (1, B, H)
    with pytest.raises(LoweringError, match="direction"):
        OVERRIDES["lstm"](x=args[0], initial_c=args[1], initial_h=args[2], weight_ih=args[3],
                          weight_hh=args[4], direction="reverse")
    with pytest.raises(LoweringError, match="hard_sigmoid"):
        OVERRIDES["lstm"](x=args[0], initial_c=args[1], initial_h=args[2], weight_ih=args[3],
                          weight_hh=args[4], recurrent_activation="hard_sigmoid")


def test_mil_executor_gru_and_rnn_equal_reference():
    """The executor's MIL gru (gate rows r, o, z; o's bias outside the reset product) against
    the Gru reference with b_hn = 0, and its rnn against the Rnn reference."""
    from rlx_jax.backends.coreml.executor.ops import OVERRIDES
    r = np.random.RandomState(2)
    f = lambda *shape: (r.randn(*shape) * 0.4).astype(np.float32)     # noqa: E731
    x, h = f(T, B, I), f(B, H)
    w_ih, w_hh, b = f(3 * H, I), f(3 * H, H), f(3 * H)
    hs, h_t = gru(x, h, w_ih, w_hh, b, np.zeros(H, np.float32))
    got = OVERRIDES["gru"](x=x, initial_h=h, weight_ih=w_ih, weight_hh=w_hh, bias=b,
                           output_sequence=True)
    for g, w in zip(got, (hs, h_t)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    w_ih, w_hh, b = f(H, I), f(H, H), f(H)
    hs, h_t = rnn(x, h, w_ih, w_hh, b)
    got = OVERRIDES["rnn"](x=x, initial_h=h, weight_ih=w_ih, weight_hh=w_hh, bias=b,
                           output_sequence=True)
    for g, w in zip(got, (hs, h_t)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cell", sorted(GRAD_CELLS))
def test_an_empty_sequence_returns_the_initial_state(cell, backend):
    """T = 0: the kind runs no step (Core ML folds it: hs empty, the final state the initial
    one, as a zero-length Scan folds), equal to jax.jit's on every backend."""
    model = nn.RNN(GRAD_CELLS[cell], return_carry=True)
    params = random_biases(model.init(jax.random.PRNGKey(0), X), 5)
    empty = np.zeros((B, 0, I), np.float32)
    carry = jax.tree.map(lambda a: a + 0.5, model.cell.initialize_carry(
        jax.random.PRNGKey(1), (B, I)))

    def fn(x):
        return model.apply(params, x, initial_carry=carry)
    jf = rlx_jax.jit(fn, backend=backend)
    kinds = {k for k in jf.lower(empty).op_counts() if k in ("Lstm", "Gru", "Rnn")}
    assert len(kinds) == (backend != "xla")
    for g, w in zip(jax.tree.leaves(jf(empty)), jax.tree.leaves(fn(empty))):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_cell_inside_a_loop_body_is_recognised(backend):
    """An nn.RNN applied in a fori_loop's body (a Scan region): recognition descends into the
    region; Core ML runs one MIL lstm inside its while_loop."""
    model = nn.RNN(nn.LSTMCell(I))
    params = model.init(jax.random.PRNGKey(0), X)

    def fn(x):
        return jax.lax.fori_loop(0, 3, lambda i, x: model.apply(params, x), x)
    region = [n.regions[0] for n in recognize(rlx_jax.trace(fn, X)).nodes if n.regions]
    assert [r.op_counts().get("Lstm") for r in region] == [1]
    jf = rlx_jax.jit(fn, backend=backend)
    if backend == "coreml":
        mil = jf.lower(X).op_counts(level="backend")
        assert mil.get("lstm") == 1 and mil.get("while_loop") == 1, mil
    np.testing.assert_allclose(jf(X), jax.jit(fn)(X), rtol=1e-5, atol=1e-5)
