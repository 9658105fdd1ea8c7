"""Reference semantics of the recurrent kinds, as jnp code of the node's operands and attributes
(recognised from flax's recurrent cells under a scan: passes/recognize_rnn.py).

Lstm is a one-layer, forward LSTM over a whole sequence, in the layout of Core ML's MIL `lstm`
op (its gate order, its weight shapes), with flax's LSTMCell formulas:

    operands  x [T, B, I] (time major), c0 [B, H], h0 [B, H],
              w_ih [4H, I], w_hh [4H, H], b [4H]   (rows in the gate order i, f, o, g)
    attrs     residuals (bool, default False)
    results   hs [T, B, H] (every step's h), c_T [B, H], h_T [B, H]; with residuals also
              zs [T, B, 4H] (every step's gate pre-activations z_t, gate order i, f, o, g)
              and cs [T, B, H] (every step's c_t: c_1 .. c_T)

    z_t  = x_t·w_ihᵀ + h_{t-1}·w_hhᵀ + b,  split into (i, f, o, g) along its last axis
    c_t  = σ(f)·c_{t-1} + σ(i)·tanh(g)
    h_t  = σ(o)·tanh(c_t)

The gate order i, f, o, g is MIL's (input, forget, output, cell); flax's LSTMCell names its
gates i, f, g, o with one Dense per gate and input (`ii`, `if`, `ig`, `io` without bias; `hi`,
`hf`, `hg`, `ho` with the bias), whose [I, H] / [H, H] kernels are the transposed row blocks
of w_ih / w_hh. The input projection of every step is one matmul before the recurrence.
The residual outputs are what the backward of a training step reads besides hs (recognised
under jax.grad: passes/rnn_residuals.py): every value of the step is an elementwise function of
z_t, c_{t-1} and h_{t-1}. `lstm_gates` gives them from hs alone (every step's z in one
matmul, the cell states by a parallel prefix of their linear recurrence, `prefix_linear`).

Gru is flax's GRUCell over a sequence, its weights in the layout of MIL's `gru` (gate order
r, o, z: reset, output - flax's candidate n -, update):

    operands  x [T, B, I], h0 [B, H], w_ih [3H, I], w_hh [3H, H], b [3H] (the x-side biases),
              b_hn [H] (the h-side bias of the candidate, inside the reset product)
    results   hs [T, B, H], h_T [B, H]

    (r_x, o_x, z_x) = x_t·w_ihᵀ + b      (r_h, o_h, z_h) = h_{t-1}·w_hhᵀ
    r = σ(r_x + r_h)    z = σ(z_x + z_h)    n = tanh(o_x + r·(o_h + b_hn))
    h_t = (1 − z)·n + z·h_{t-1}

Rnn is flax's SimpleCell (tanh, no residual) over a sequence, in the layout of MIL's `rnn`:

    operands  x [T, B, I], h0 [B, H], w_ih [H, I], w_hh [H, H], b [H]
    results   hs [T, B, H], h_T [B, H]            h_t = tanh(x_t·w_ihᵀ + b + h_{t-1}·w_hhᵀ)
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .ops import OpKind as K

GATES = ("i", "f", "o", "g")          # Lstm: the row blocks of w_ih, w_hh and b, in this order
GRU_GATES = ("r", "n", "z")           # Gru: the row blocks (MIL's r, o, z; o is flax's n)


def _by_rows(a, w):
    """a·wᵀ, contracting a's last axis with w's rows' axis (no transpose of w)."""
    return lax.dot_general(a, w, (((a.ndim - 1,), (1,)), ((), ())))


def lstm(x, c0, h0, w_ih, w_hh, b, residuals=False):
    """Lstm (module docstring): (hs, c_T, h_T), then (zs, cs) with `residuals`."""
    xz = _by_rows(x, w_ih) + b

    def step(carry, xz_t):
        c, h = carry
        z = xz_t + _by_rows(h, w_hh)
        i, f, o, g = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), ((h, z, c) if residuals else h)
    (c, h), ys = lax.scan(step, (c0, h0), xz)
    return (ys[0], c, h) + tuple(ys[1:]) if residuals else (ys, c, h)


def before(s0, seq):
    """The state before each step: (s0, seq_0, ..., seq_{T-2}) along axis 0, [T, ...]."""
    return jnp.concatenate([s0[None], seq])[:-1]


def prefix_linear(a, u):
    """y_t = a_t·y_{t-1} + u_t along axis 0 (y_{-1} = 0), by doubling: after the round of
    offset d, entry t holds the composition of the steps t - 2d + 1 .. t."""
    zero, one = np.zeros((), a.dtype), np.ones((), a.dtype)
    d = 1
    while d < a.shape[0]:
        pad = [(d, 0, 0)] + [(0, 0, 0)] * (a.ndim - 1)
        u = a * lax.pad(u[:-d], zero, pad) + u
        a = a * lax.pad(a[:-d], one, pad)
        d *= 2
    return u


def lstm_gates(x, c0, h0, w_ih, w_hh, b, hs):
    """An Lstm's residual outputs (zs, cs) from its hs, without a recurrence: every z_t at
    once from h_{t-1} (`before`), then c_t = σ(f_t)·c_{t-1} + σ(i_t)·tanh(g_t), linear in
    c_{t-1}, by `prefix_linear` (⌈log2(T + 1)⌉ rounds over the whole sequence)."""
    zs = _by_rows(x, w_ih) + b + _by_rows(before(h0, hs), w_hh)
    i, f, _, g = jnp.split(zs, 4, axis=-1)
    a, u = jax.nn.sigmoid(f), jax.nn.sigmoid(i) * jnp.tanh(g)
    cs = prefix_linear(jnp.concatenate([jnp.zeros_like(c0)[None], a]),
                       jnp.concatenate([c0[None], u]))[1:]
    return zs, cs


def gru(x, h0, w_ih, w_hh, b, b_hn):
    """Gru (module docstring): (hs, h_T)."""
    xz = _by_rows(x, w_ih) + b

    def step(h, z):
        r_x, o_x, z_x = jnp.split(z, 3, axis=-1)
        r_h, o_h, z_h = jnp.split(_by_rows(h, w_hh), 3, axis=-1)
        r, u = jax.nn.sigmoid(r_x + r_h), jax.nn.sigmoid(z_x + z_h)
        n = jnp.tanh(o_x + r * (o_h + b_hn))
        h = (1 - u) * n + u * h
        return h, h
    h, hs = lax.scan(step, h0, xz)
    return hs, h


def rnn(x, h0, w_ih, w_hh, b):
    """Rnn (module docstring): (hs, h_T)."""
    xz = _by_rows(x, w_ih) + b

    def step(h, z):
        h = jnp.tanh(z + _by_rows(h, w_hh))
        return h, h
    h, hs = lax.scan(step, h0, xz)
    return hs, h


RNN_REFERENCE = {
    K.Lstm: lstm,
    K.Gru: gru,
    K.Rnn: rnn,
}
