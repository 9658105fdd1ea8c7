"""MLX rules for the recurrent kinds (semantics: ir/reference_rnn.py).

Lstm is one recurrence inside the compiled MLX program: the input projection of every step is
one matmul before it (x·w_ihᵀ + b, [T, B, 4H]); then a Python loop over the T steps (the
sequence length is static) emits, per step, one matmul h·w_hhᵀ, the add, the split into the
four gates and the cell's elementwise update, which mx.compile traces once into one graph and
fuses. The hidden states are stacked once at the end."""
import mlx.core as mx

from ...ir.ops import OpKind as K
from .table import mlx_rule


@mlx_rule(K.Lstm)
def _lstm(ctx, node, x, c, h, w_ih, w_hh, b):
    xz = mx.matmul(x, w_ih.T) + b
    w_hh_t = w_hh.T
    hs = []
    for t in range(x.shape[0]):
        i, f, o, g = mx.split(xz[t] + mx.matmul(h, w_hh_t), 4, axis=-1)
        c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(g)
        h = mx.sigmoid(o) * mx.tanh(c)
        hs.append(h)
    if not hs:                              # an empty sequence: no step, the initial state
        return mx.zeros((0,) + h.shape, h.dtype), c, h
    return mx.stack(hs, axis=0), c, h
