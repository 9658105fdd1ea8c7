"""Recurrent kinds -> MIL (semantics: ir/reference_rnn.py).

Lstm is ONE MIL `lstm` op (iOS15 opset, coremltools' op spec): x [T, B, I], initial_h and
initial_c [B, H], weight_ih [4H, I], weight_hh [4H, H], bias [4H] in the gate order (input,
forget, output, cell) - the kind's own layout, so the operands pass as they are -,
direction "forward", output_sequence True, recurrent_activation "sigmoid", cell_activation and
activation "tanh"; its results (every step's h, the final h, the final c) are the kind's
(hs, c_T, h_T) reordered.

The spec types the op float32 only and takes its weights and bias as compile-time constants
(an inference program with the weights closed over: recognition's concatenation of the gate
kernels folds into constants). Where they are not (weights that are the program's inputs, as
in training, or float16 values), MIL cannot take the op, and the rule lowers the kind's
decomposition instead (passes/decompose/rnn.py: a Scan, here a while_loop, mil/control.py),
as the LayerNorm rule does with run-time gamma and beta: the op counts show which was built.
"""
from ....ir.graph import Builder, Graph
from ....ir.interpret import interpret
from ....ir.ops import OpKind as K
from ....ir.rewrite import dce
from ....passes.decompose import DECOMPS
from .table import MIL_RULES, mil_rule


def _decomposed(ctx, node, operands):
    """The MIL vars of `node`'s decomposition run on `operands` in the current block."""
    b = Builder(Graph(node.kind.name))
    ins = [b.input(v.shape, v.dtype) for v in node.inputs]
    b.add(node.kind, ins, dict(node.attrs))
    outs = DECOMPS[node.kind](b, b.graph.nodes[-1], *ins)
    b.graph.outputs = list(outs)
    return interpret(dce(b.graph), MIL_RULES, list(operands), ctx, backend="coreml")


def _fits(ctx, operands):
    """The MIL lstm op takes these vars: float32, the weights and bias constants."""
    return all(ctx.np_dtype(v) == "float32" for v in operands) and all(
        v.val is not None for v in operands[3:])


@mil_rule(K.Lstm)
def _lstm(ctx, node, x, c, h, w_ih, w_hh, b):
    if not _fits(ctx, (x, c, h, w_ih, w_hh, b)):
        return tuple(_decomposed(ctx, node, (x, c, h, w_ih, w_hh, b)))
    hs, h_t, c_t = ctx.mb.lstm(
        x=x, initial_h=h, initial_c=c, weight_ih=w_ih, weight_hh=w_hh, bias=b,
        direction="forward", output_sequence=True, recurrent_activation="sigmoid",
        cell_activation="tanh", activation="tanh")
    return hs, c_t, h_t
