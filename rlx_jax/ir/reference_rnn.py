"""Reference semantics of the recurrent kinds, as jnp code of the node's operands and attributes
(recognised from flax's recurrent cells under a scan: passes/recognize_rnn.py).

Lstm is a one-layer, forward LSTM over a whole sequence, in the layout of Core ML's MIL `lstm`
op (its gate order, its weight shapes), with flax's LSTMCell formulas:

    operands  x [T, B, I] (time major), c0 [B, H], h0 [B, H],
              w_ih [4H, I], w_hh [4H, H], b [4H]   (rows in the gate order i, f, o, g)
    attrs     none
    results   hs [T, B, H] (every step's h), c_T [B, H], h_T [B, H]

    z_t  = x_t·w_ihᵀ + h_{t-1}·w_hhᵀ + b,  split into (i, f, o, g) along its last axis
    c_t  = σ(f)·c_{t-1} + σ(i)·tanh(g)
    h_t  = σ(o)·tanh(c_t)

The gate order i, f, o, g is MIL's (input, forget, output, cell); flax's LSTMCell names its
gates i, f, g, o with one Dense per gate and input (`ii`, `if`, `ig`, `io` without bias; `hi`,
`hf`, `hg`, `ho` with the bias), whose [I, H] / [H, H] kernels are the transposed row blocks
of w_ih / w_hh. The input projection of every step is one matmul before the recurrence.

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
from jax import lax

from .ops import OpKind as K

GATES = ("i", "f", "o", "g")          # Lstm: the row blocks of w_ih, w_hh and b, in this order
GRU_GATES = ("r", "n", "z")           # Gru: the row blocks (MIL's r, o, z; o is flax's n)


def _by_rows(a, w):
    """a·wᵀ, contracting a's last axis with w's rows' axis (no transpose of w)."""
    return lax.dot_general(a, w, (((a.ndim - 1,), (1,)), ((), ())))


def lstm(x, c0, h0, w_ih, w_hh, b):
    """Lstm (module docstring): (hs, c_T, h_T)."""
    xz = _by_rows(x, w_ih) + b

    def step(carry, z):
        c, h = carry
        i, f, o, g = jnp.split(z + _by_rows(h, w_hh), 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h
    (c, h), hs = lax.scan(step, (c0, h0), xz)
    return hs, c, h


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
