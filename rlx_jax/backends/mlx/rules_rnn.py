"""MLX rules for the recurrent kinds (semantics: ir/reference_rnn.py).

Each is one recurrence inside the compiled MLX program: the input projection of every step is
one matmul before it (x·w_ihᵀ + b, [T, B, G·H]); then a Python loop over the T steps (the
sequence length is static) emits, per step, one matmul h·w_hhᵀ (with the step's input
projection added by the matmul, `addmm`, where the cell adds them), the split into the gates and
the cell's elementwise update, which mx.compile traces once into one graph and fuses. The
hidden states are stacked once at the end (an Lstm's gate pre-activations and cell states too
where it yields them, attribute residuals); an empty sequence returns the initial state."""
import mlx.core as mx

from ...ir.ops import OpKind as K
from .table import mlx_rule


def _recurrence(x, w_ih, b, w_hh, state, step):
    """(hs, final state) of `step(x_t·w_ihᵀ + b, w_hhᵀ, state) -> state` over the T steps; the
    last entry of a state is its h. The weights are made contiguous in their [in, G·H] layout
    once (a matmul with a transposed operand is the slower one on the CPU's BLAS)."""
    w_ih_t, w_hh_t = mx.contiguous(w_ih.T), mx.contiguous(w_hh.T)
    xz = mx.addmm(b, x.reshape(-1, x.shape[-1]), w_ih_t).reshape(*x.shape[:-1], w_ih.shape[0])
    hs = []
    for t in range(x.shape[0]):
        state = step(xz[t], w_hh_t, state)
        hs.append(state[-1])
    return _stacked(hs, state[-1].shape, state[-1].dtype), state


def _stacked(steps, shape, dtype):
    """The per-step arrays (each of `shape`) stacked along a new axis 0."""
    return mx.stack(steps, axis=0) if steps else mx.zeros((0,) + tuple(shape), dtype)


@mlx_rule(K.Lstm)
def _lstm(ctx, node, x, c, h, w_ih, w_hh, b):
    zs, cs = [], []

    def step(xz, w, state):
        z = mx.addmm(xz, state[-1], w)
        i, f, o, g = mx.split(z, 4, axis=-1)
        c = mx.sigmoid(f) * state[0] + mx.sigmoid(i) * mx.tanh(g)
        zs.append(z)
        cs.append(c)
        return c, mx.sigmoid(o) * mx.tanh(c)
    hs, (c_t, h_t) = _recurrence(x, w_ih, b, w_hh, (c, h), step)
    if not node.attrs.get("residuals"):
        return hs, c_t, h_t
    zs_t = _stacked(zs, (c.shape[0], b.shape[0]), c.dtype)
    return hs, c_t, h_t, zs_t, _stacked(cs, c.shape, c.dtype)


@mlx_rule(K.Gru)
def _gru(ctx, node, x, h, w_ih, w_hh, b, b_hn):
    def step(xz, w, state):
        r_x, o_x, z_x = mx.split(xz, 3, axis=-1)
        r_h, o_h, z_h = mx.split(mx.matmul(state[-1], w), 3, axis=-1)
        r, u = mx.sigmoid(r_x + r_h), mx.sigmoid(z_x + z_h)
        n = mx.tanh(o_x + r * (o_h + b_hn))
        return ((1 - u) * n + u * state[0],)
    hs, (h,) = _recurrence(x, w_ih, b, w_hh, (h,), step)
    return hs, h


@mlx_rule(K.Rnn)
def _rnn(ctx, node, x, h, w_ih, w_hh, b):
    def step(xz, w, state):
        return (mx.tanh(mx.addmm(xz, state[-1], w)),)
    hs, (h,) = _recurrence(x, w_ih, b, w_hh, (h,), step)
    return hs, h
