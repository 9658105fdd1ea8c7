"""Recurrent kinds -> MIL (semantics: ir/reference_rnn.py): each ONE MIL op of the iOS15
opset (coremltools' op spec), direction "forward", output_sequence True.

- Lstm -> `lstm`: x [T, B, I], initial_h and initial_c [B, H], weight_ih [4H, I], weight_hh
  [4H, H], bias [4H] in the gate order (input, forget, output, cell) - the kind's own layout,
  so the operands pass as they are -, recurrent_activation "sigmoid", cell_activation and
  activation "tanh"; its results (every step's h, the final h, the final c) are the kind's
  (hs, c_T, h_T) reordered. An Lstm yielding its residual outputs (attribute residuals: every
  step's gate pre-activations and cell state, which the op does not give) computes them from
  the op's hs without a loop (ir/reference_rnn.py's `lstm_gates`: one matmul, a parallel
  prefix) - the constant-weights case; with weights as inputs the decomposition yields them.
- Gru -> `gru`: weights in the gate order (reset, output, update), the kind's; MIL's output
  gate adds its bias outside the reset product (o = tanh(W_io x + r·W_ho h + b_o)) where flax
  adds the h-side one inside (r·(W_hn h + b_hn)), so the op is taken only where b_hn is zero.
- Rnn -> `rnn`: activation "tanh", the kind's operands as they are.

The spec types the ops float32 only and takes their weights and biases as compile-time
constants (an inference program with the weights closed over: recognition's concatenation of
the gate kernels folds into constants). Where they are not (weights that are the program's
inputs, as in training, float16 values, or a Gru's b_hn not zero), MIL cannot take the op, and
the rule lowers the kind's decomposition instead (passes/decompose/rnn.py: a Scan, here a
while_loop, mil/control.py), as the LayerNorm rule does with run-time gamma and beta: the op
counts show which was built.
"""
import numpy as np

from ....ir.graph import Builder, Graph
from ....ir.interpret import interpret
from ....ir.ops import OpKind as K
from ....ir.rewrite import dce
from ....ir.reference_rnn import lstm_gates
from ....passes.decompose import DECOMPS
from ....passes.decompose.formulas import inline
from .table import MIL_RULES, mil_rule

FORWARD = {"direction": "forward", "output_sequence": True}


def _built(ctx, name, types, emit, operands):
    """The MIL vars of a graph of inputs typed as the values `types`, whose outputs
    `emit(builder, inputs)` gives, run on `operands` in the current block."""
    b = Builder(Graph(name))
    ins = [b.input(v.shape, v.dtype) for v in types]
    b.graph.outputs = list(emit(b, ins))
    return interpret(dce(b.graph), MIL_RULES, list(operands), ctx, backend="coreml")


def _decomposed(ctx, node, operands):
    """The MIL vars of `node`'s decomposition run on `operands` in the current block."""
    def emit(b, ins):
        b.add(node.kind, ins, dict(node.attrs))
        return DECOMPS[node.kind](b, b.graph.nodes[-1], *ins)
    return _built(ctx, node.kind.name, node.inputs, emit, operands)


def _fits(ctx, operands, states):
    """A recurrent MIL op takes these vars (x, `states` states, then the weights and biases):
    float32, the weights and biases constants."""
    return all(ctx.np_dtype(v) == "float32" for v in operands) and all(
        v.val is not None for v in operands[1 + states:])


@mil_rule(K.Lstm)
def _lstm(ctx, node, x, c, h, w_ih, w_hh, b):
    operands = (x, c, h, w_ih, w_hh, b)
    if not _fits(ctx, operands, 2):
        return tuple(_decomposed(ctx, node, operands))
    hs, h_t, c_t = ctx.mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=w_ih, weight_hh=w_hh,
                               bias=b, recurrent_activation="sigmoid", cell_activation="tanh",
                               activation="tanh", **FORWARD)
    if not node.attrs.get("residuals"):
        return hs, c_t, h_t
    gates = _built(ctx, "lstm_gates", tuple(node.inputs) + tuple(node.outputs[:1]),
                   lambda b, ins: inline(b, lstm_gates, ins), operands + (hs,))
    return (hs, c_t, h_t) + tuple(gates)


@mil_rule(K.Gru)
def _gru(ctx, node, x, h, w_ih, w_hh, b, b_hn):
    operands = (x, h, w_ih, w_hh, b, b_hn)
    if not _fits(ctx, operands, 1) or np.any(b_hn.val):
        return tuple(_decomposed(ctx, node, operands))
    hs, h_t = ctx.mb.gru(x=x, initial_h=h, weight_ih=w_ih, weight_hh=w_hh, bias=b,
                         recurrent_activation="sigmoid", activation="tanh", **FORWARD)
    return hs, h_t


@mil_rule(K.Rnn)
def _rnn(ctx, node, x, h, w_ih, w_hh, b):
    if not _fits(ctx, (x, h, w_ih, w_hh, b), 1):
        return tuple(_decomposed(ctx, node, (x, h, w_ih, w_hh, b)))
    hs, h_t = ctx.mb.rnn(x=x, initial_h=h, weight_ih=w_ih, weight_hh=w_hh, bias=b,
                         activation="tanh", **FORWARD)
    return hs, h_t
