"""MIL reference executor: the recurrent MIL ops coremltools cannot evaluate (`lstm`, `gru`,
`rnn`), exact NumPy versions of coremltools' op spec, registered in executor_ops.OVERRIDES.

With W·x the product with a weight's rows ([G·H, I] weights, gates in row blocks of H), for
t = 0..s-1 (iOS15):

    lstm  i_t = recurrent_activation(W_ii x_t + W_hi h_{t-1} + b_i)    (rows 0:H)
          f_t = recurrent_activation(W_if x_t + W_hf h_{t-1} + b_f)    (rows H:2H)
          o_t = recurrent_activation(W_io x_t + W_ho h_{t-1} + b_o)    (rows 2H:3H)
          z_t = cell_activation(W_iz x_t + W_hz h_{t-1} + b_z)         (rows 3H:4H)
          c_t = f_t * c_{t-1} + i_t * z_t          h_t = o_t * activation(c_t)
    gru   r_t = recurrent_activation(W_ir x_t + W_hr h_{t-1} + b_r)    (rows 0:H)
          o_t = activation(W_io x_t + r_t * W_ho h_{t-1} + b_o)        (rows H:2H)
          z_t = recurrent_activation(W_iz x_t + W_hz h_{t-1} + b_z)    (rows 2H:3H)
          h_t = (1 - z_t) * o_t + z_t * h_{t-1}
    rnn   h_t = activation(W_ih x_t + W_hh h_{t-1} + b)

each returning every h_t stacked [s, b, H] with output_sequence, else the last one [1, b, H],
then the final h (and lstm the final c), computed in float32 (the ops' only type). What the
spec leaves open is refused by name rather than guessed: the parameters of hard_sigmoid and
scaled_tanh, where an lstm's peephole and `clip` enter the formulas, and the order of a
reverse direction's output sequence (direction "reverse" or "bidirectional"); the lowerings
emit none of them.
"""
import numpy as np

from ....errors import LoweringError
from .ops import override

ACTIVATIONS = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
    "linear": lambda v: v,
}


def _activation(name, which, op="lstm"):
    name = str(name).lower()
    if name not in ACTIVATIONS:
        raise LoweringError(f"MIL executor: {op} {which}={name!r} is not implemented (the spec "
                            f"names it without its parameters)")
    return ACTIVATIONS[name]


def _forward_only(op, direction):
    if str(direction) != "forward":
        raise LoweringError(f"MIL executor: {op} direction={str(direction)!r} is not "
                            f"implemented (the spec does not say how a reverse output "
                            f"sequence is ordered)")


def _refuse_open(direction, peephole, clip, back):
    _forward_only("lstm", direction)
    if peephole is not None and np.any(np.asarray(peephole)):
        raise LoweringError("MIL executor: lstm with a peephole is not implemented (the spec "
                            "does not say where it enters the gates)")
    if clip is not None:
        raise LoweringError("MIL executor: lstm with clip is not implemented (the spec does not "
                            "say which value is clipped)")
    if any(v is not None for v in back):
        raise LoweringError("MIL executor: lstm backward-direction weights are not implemented")


@override("lstm")
def _lstm(x, initial_h, initial_c, weight_ih, weight_hh, bias=None, peephole=None,
          weight_ih_back=None, weight_hh_back=None, bias_back=None, peephole_back=None,
          direction="forward", output_sequence=False, recurrent_activation="sigmoid",
          cell_activation="tanh", activation="tanh", clip=None, **_):
    _refuse_open(direction, peephole, clip, (weight_ih_back, weight_hh_back, bias_back,
                                             peephole_back))
    gate = _activation(recurrent_activation, "recurrent_activation")
    cell = _activation(cell_activation, "cell_activation")
    out = _activation(activation, "activation")
    hidden = np.shape(weight_hh)[1]

    def step(z, hz, state):
        i, f, o = (gate(z[:, k * hidden:(k + 1) * hidden] + hz[:, k * hidden:(k + 1) * hidden])
                   for k in range(3))
        c = f * state[0] + i * cell(z[:, 3 * hidden:] + hz[:, 3 * hidden:])
        return c, o * out(c)
    seq, (c, h) = _run(x, (initial_c, initial_h), weight_ih, weight_hh, bias, step,
                       output_sequence)
    return seq, h, c


def _run(x, state, weight_ih, weight_hh, bias, step, output_sequence):
    """(the output sequence, the final state) of `step(x_t·W_ihᵀ + b, h·W_hhᵀ, state)` over
    the s steps, in float32; the last entry of a state is its h."""
    f32 = np.float32
    x, w_ih, w_hh = (np.asarray(v, f32) for v in (x, weight_ih, weight_hh))
    state = tuple(np.asarray(v, f32) for v in state)
    b = np.zeros(w_hh.shape[0], f32) if bias is None else np.asarray(bias, f32)
    hs = []
    for t in range(x.shape[0]):
        z = (x[t] @ w_ih.T + b).astype(f32)
        state = tuple(v.astype(f32) for v in step(z, (state[-1] @ w_hh.T).astype(f32), state))
        hs.append(state[-1])
    seq = np.stack(hs) if bool(output_sequence) else state[-1][None]
    return seq, state


@override("gru")
def _gru(x, initial_h, weight_ih, weight_hh, bias=None, direction="forward",
         output_sequence=False, recurrent_activation="sigmoid", activation="tanh", **_):
    _forward_only("gru", direction)
    gate = _activation(recurrent_activation, "recurrent_activation", "gru")
    out = _activation(activation, "activation", "gru")
    hidden = np.shape(weight_hh)[1]

    def step(z, hz, state):
        part = [slice(k * hidden, (k + 1) * hidden) for k in range(3)]
        r = gate(z[:, part[0]] + hz[:, part[0]])
        o = out(z[:, part[1]] + r * hz[:, part[1]])
        u = gate(z[:, part[2]] + hz[:, part[2]])
        return ((1 - u) * o + u * state[0],)
    seq, (h,) = _run(x, (initial_h,), weight_ih, weight_hh, bias, step, output_sequence)
    return seq, h


@override("rnn")
def _rnn(x, initial_h, weight_ih, weight_hh, bias=None, direction="forward",
         output_sequence=False, activation="tanh", **_):
    _forward_only("rnn", direction)
    out = _activation(activation, "activation", "rnn")
    seq, (h,) = _run(x, (initial_h,), weight_ih, weight_hh, bias,
                     lambda z, hz, state: (out(z + hz),), output_sequence)
    return seq, h
