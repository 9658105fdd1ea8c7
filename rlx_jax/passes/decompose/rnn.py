"""Decompositions of the recurrent kinds: ir/reference_rnn.py's formula translated, a Scan whose
body is the cell (the input projection of every step one matmul before it), so every backend
runs the kind and JAX's autodiff of the scan differentiates it."""
from ...ir.ops import OpKind as K
from ...ir.reference_rnn import gru, lstm, rnn
from . import decomp
from .formulas import inline


@decomp(K.Lstm)
def _lstm(b, node, *operands):
    return inline(b, lstm, operands, **node.attrs)


@decomp(K.Gru)
def _gru(b, node, *operands):
    return inline(b, gru, operands, **node.attrs)


@decomp(K.Rnn)
def _rnn(b, node, *operands):
    return inline(b, rnn, operands, **node.attrs)
