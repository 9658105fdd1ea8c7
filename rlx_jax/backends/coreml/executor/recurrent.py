"""MIL reference executor: the recurrent MIL ops coremltools cannot evaluate (`lstm`), exact
NumPy versions of coremltools' op spec, registered in executor_ops.OVERRIDES.

`lstm` (iOS15): for t = 0..s-1, with W·x the product with each [4H, I] weight's rows,

    i_t = recurrent_activation(W_ii x_t + W_hi h_{t-1} + b_i)     (rows 0:H)
    f_t = recurrent_activation(W_if x_t + W_hf h_{t-1} + b_f)     (rows H:2H)
    o_t = recurrent_activation(W_io x_t + W_ho h_{t-1} + b_o)     (rows 2H:3H)
    z_t = cell_activation(W_iz x_t + W_hz h_{t-1} + b_z)          (rows 3H:4H)
    c_t = f_t * c_{t-1} + i_t * z_t          h_t = o_t * activation(c_t)

returning (every h_t stacked [s, b, H] with output_sequence, else the last one [1, b, H]; the
final h; the final c), computed in float32 (the op's only type). What the spec leaves open is
refused by name rather than guessed: the parameters of hard_sigmoid and scaled_tanh, where a
peephole and `clip` enter the formulas, and the order of a reverse direction's output sequence
(direction "reverse" or "bidirectional"); the lowerings emit none of them.
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


def _activation(name, which):
    name = str(name).lower()
    if name not in ACTIVATIONS:
        raise LoweringError(f"MIL executor: lstm {which}={name!r} is not implemented (the spec "
                            f"names it without its parameters)")
    return ACTIVATIONS[name]


def _refuse_open(direction, peephole, clip, back):
    if str(direction) != "forward":
        raise LoweringError(f"MIL executor: lstm direction={str(direction)!r} is not "
                            f"implemented (the spec does not say how a reverse output "
                            f"sequence is ordered)")
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
    f32 = np.float32
    x, h, c = (np.asarray(v, f32) for v in (x, initial_h, initial_c))
    w_ih, w_hh = np.asarray(weight_ih, f32), np.asarray(weight_hh, f32)
    hidden = w_hh.shape[1]
    b = np.zeros(4 * hidden, f32) if bias is None else np.asarray(bias, f32)
    hs = []
    for t in range(x.shape[0]):
        z = (x[t] @ w_ih.T + h @ w_hh.T + b).astype(f32)
        i, f, o = (gate(z[:, k * hidden:(k + 1) * hidden]) for k in range(3))
        c = (f * c + i * cell(z[:, 3 * hidden:])).astype(f32)
        h = (o * out(c)).astype(f32)
        hs.append(h)
    seq = np.stack(hs) if bool(output_sequence) else h[None]
    return seq, h, c
