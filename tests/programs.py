"""Representative programs as data (tests/cases.py records): each a scalar loss over
(params, *inputs) plus makers.

Written in plain jnp/lax, as users write them, so the frontend sees what JAX really emits
(softmax, layer norm and attention arrive decomposed). test_grads.py runs the forward and
jax.grad of each through rlx_jax.jit on every backend, and checks float64 finite differences.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .cases import Case


def program(name, loss, params, inputs, atol=1e-5, rtol=1e-4):
    """The case of a program: `loss` (params, *inputs) -> scalar, `params` (rng, dtype) -> pytree
    of float arrays, `inputs` (rng, dtype) -> tuple of arrays."""
    return Case(name, fn=loss, params=params, inputs=inputs, atol=atol, rtol=rtol)


def _normal(r, dtype, *shape, scale=None):
    scale = (1.0 / np.sqrt(shape[0])) if scale is None else scale
    return (r.standard_normal(shape) * scale).astype(dtype)


# ---- MLP ---------------------------------------------------------------------------------------

def mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h) if i % 2 == 0 else jnp.tanh(h)
    return jnp.mean((h - y) ** 2)


def mlp_params(r, dt):
    sizes = [6, 16, 12, 3]
    return [(_normal(r, dt, a, b), _normal(r, dt, b, scale=0.1)) for a, b in
            zip(sizes[:-1], sizes[1:])]


# ---- conv net with max and average pooling -----------------------------------------------------

def _conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def _avg_pool(x):
    pad = ((0, 0), (1, 1), (1, 1), (0, 0))
    s = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), pad)
    return s / 9.0


def convnet_loss(params, x, labels):
    h = jax.nn.relu(_conv(x, params["c1"]) + params["b1"])
    h = _max_pool(h)
    h = jnp.tanh(_conv(h, params["c2"]))
    h = _avg_pool(h)
    logits = h.reshape(h.shape[0], -1) @ params["fc"]
    return softmax_cross_entropy(logits, labels)


def convnet_params(r, dt):
    return {"c1": _normal(r, dt, 3, 3, 2, 4, scale=0.3), "b1": _normal(r, dt, 4, scale=0.1),
            "c2": _normal(r, dt, 3, 3, 4, 3, scale=0.3), "fc": _normal(r, dt, 3 * 3 * 3, 5)}


# ---- attention block ---------------------------------------------------------------------------

def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def attention_block(p, x, heads=2):
    bsz, t, d = x.shape
    h = layer_norm(x, p["ln_g"], p["ln_b"])
    qkv = h @ p["wqkv"]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    split = lambda a: a.reshape(bsz, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads)
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -1e9)
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", a, v).transpose(0, 2, 1, 3).reshape(bsz, t, d)
    x = x + o @ p["wo"]
    return x + jax.nn.gelu(layer_norm(x, p["ln_g"], p["ln_b"]) @ p["w1"]) @ p["w2"]


def attention_loss(params, x):
    return jnp.mean(attention_block(params, x) ** 2)


def attention_params(r, dt):
    d = 8
    return {"ln_g": (1 + _normal(r, dt, d, scale=0.1)).astype(dt),
            "ln_b": _normal(r, dt, d, scale=0.1), "wqkv": _normal(r, dt, d, 3 * d),
            "wo": _normal(r, dt, d, d), "w1": _normal(r, dt, d, 16), "w2": _normal(r, dt, 16, d)}


# ---- embedding, layer norm, cross entropy ------------------------------------------------------

def embedding_loss(params, ids):
    e = params["table"][ids]                       # gather; its gradient is a scatter-add
    pooled = jnp.mean(jnp.tanh(e), axis=1)
    return jnp.sum((pooled @ params["w"]) ** 2)


def embedding_params(r, dt):
    return {"table": _normal(r, dt, 10, 6, scale=1.0), "w": _normal(r, dt, 6, 3)}


def layernorm_loss(params, x):
    y = layer_norm(x, params["g"], params["b"])
    return jnp.sum(y * jnp.linspace(-1.0, 1.0, x.shape[-1], dtype=x.dtype))


def softmax_cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return -jnp.mean(jnp.sum(onehot * logp, axis=-1))


def xent_loss(params, x, labels):
    return softmax_cross_entropy(x @ params["w"] + params["b"], labels)


# ---- recurrent language model over lax.scan ---------------------------------------------------

def rnn_lm_loss(params, tokens):
    """Next-token cross-entropy of a tanh RNN run by lax.scan over time (tokens[B, T+1])."""
    xs, ys = tokens[:, :-1].T, tokens[:, 1:].T

    def cell(h, x):
        h = jnp.tanh(params["emb"][x] + h @ params["wh"])
        return h, h @ params["out"]
    _, logits = lax.scan(cell, jnp.zeros((tokens.shape[0], params["wh"].shape[0]),
                                         params["wh"].dtype), xs)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, ys[..., None], axis=-1))


def rnn_lm_params(r, dt):
    return {"emb": _normal(r, dt, 6, 8, scale=0.5), "wh": _normal(r, dt, 8, 8, scale=0.3),
            "out": _normal(r, dt, 8, 6, scale=0.3)}


PROGRAMS = [
    program("mlp", mlp_loss, mlp_params,
            lambda r, dt: (_normal(r, dt, 5, 6, scale=1.0), _normal(r, dt, 5, 3, scale=1.0))),
    program("convnet", convnet_loss, convnet_params,
            lambda r, dt: (_normal(r, dt, 2, 6, 6, 2, scale=1.0),
                           r.randint(0, 5, (2,)).astype(np.int32))),
    program("attention", attention_loss, attention_params,
            lambda r, dt: (_normal(r, dt, 2, 4, 8, scale=1.0),)),
    program("embedding", embedding_loss, embedding_params,
            lambda r, dt: (r.randint(0, 10, (3, 4)).astype(np.int32),)),
    program("layernorm", layernorm_loss,
            lambda r, dt: {"g": (1 + _normal(r, dt, 7, scale=0.2)).astype(dt),
                           "b": _normal(r, dt, 7, scale=0.2)},
            lambda r, dt: (_normal(r, dt, 4, 7, scale=2.0),)),
    program("softmax_xent", xent_loss,
            lambda r, dt: {"w": _normal(r, dt, 6, 9), "b": _normal(r, dt, 9, scale=0.1)},
            lambda r, dt: (_normal(r, dt, 5, 6, scale=1.0),
                           r.randint(0, 9, (5,)).astype(np.int32))),
    program("rnn_lm", rnn_lm_loss, rnn_lm_params,
            lambda r, dt: (r.randint(0, 6, (3, 7)).astype(np.int32),)),
]
