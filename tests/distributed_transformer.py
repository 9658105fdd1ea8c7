"""One process of tests/test_distributed.py's transformer launch, started by `mlx.launch`: 5
data-parallel SGD steps of a one-block transformer language model (token and position
embeddings, layer norm written with jnp, single-head causal attention, a gelu MLP, softmax cross
entropy over a tiny vocabulary), gradients averaged with lax.pmean over "batch"; saves the
parameters and losses to OUT/rank<r>.npz for the test to check against plain JAX."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import rlx_jax
from rlx_jax import distributed

STEPS, LR, GLOBAL_BATCH, SEQ, VOCAB, D_MODEL, D_MLP = 5, 0.5, 8, 8, 11, 16, 32


def transformer_problem():
    """(params, global tokens, global next-token targets), the same in every process and in
    the test: tokens count up mod VOCAB from a random start, so the next token is learnable."""
    rng = np.random.default_rng(1)

    def w(*shape):
        return (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
    params = {"tok": w(VOCAB, D_MODEL), "pos": w(SEQ, D_MODEL) * 0.1,
              "ln1_g": np.ones(D_MODEL, np.float32), "ln1_b": np.zeros(D_MODEL, np.float32),
              "wq": w(D_MODEL, D_MODEL), "wk": w(D_MODEL, D_MODEL), "wv": w(D_MODEL, D_MODEL),
              "wo": w(D_MODEL, D_MODEL),
              "ln2_g": np.ones(D_MODEL, np.float32), "ln2_b": np.zeros(D_MODEL, np.float32),
              "w1": w(D_MODEL, D_MLP), "b1": np.zeros(D_MLP, np.float32),
              "w2": w(D_MLP, D_MODEL), "b2": np.zeros(D_MODEL, np.float32),
              "lnf_g": np.ones(D_MODEL, np.float32), "lnf_b": np.zeros(D_MODEL, np.float32),
              "out": w(D_MODEL, VOCAB)}
    start = rng.integers(0, VOCAB, size=(GLOBAL_BATCH, 1))
    seq = (start + np.arange(SEQ + 1)) % VOCAB
    return params, seq[:, :-1].astype(np.int32), seq[:, 1:].astype(np.int32)


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def forward(params, tokens):
    """Logits (batch, SEQ, VOCAB) of the one-block pre-norm transformer."""
    x = params["tok"][tokens] + params["pos"][None, :tokens.shape[1]]
    h = layer_norm(x, params["ln1_g"], params["ln1_b"])
    q, k, v = h @ params["wq"], h @ params["wk"], h @ params["wv"]
    scores = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(D_MODEL).astype(np.float32)
    causal = jnp.tril(jnp.ones((tokens.shape[1], tokens.shape[1]), bool))
    scores = jnp.where(causal, scores, -1e9)
    x = x + jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v) @ params["wo"]
    h = layer_norm(x, params["ln2_g"], params["ln2_b"])
    x = x + jax.nn.gelu(h @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return layer_norm(x, params["lnf_g"], params["lnf_b"]) @ params["out"]


def loss_fn(params, batch):
    tokens, targets = batch
    logp = jax.nn.log_softmax(forward(params, tokens), axis=-1)
    return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(targets, VOCAB), axis=-1))


def sgd_step(params, batch, axis_name=None):
    loss, g = jax.value_and_grad(loss_fn)(params, batch)
    if axis_name is not None:
        g, loss = lax.pmean((g, loss), axis_name)
    return jax.tree.map(lambda p, d: p - LR * d, params, g), loss


def main(out_dir):
    distributed.initialize(backend="ring")
    r, n = distributed.rank(), distributed.size()
    params, tokens, targets = transformer_problem()
    step = rlx_jax.jit(lambda p, b: sgd_step(p, b, "batch"), backend="mlx", axis_name="batch")
    local = distributed.shard((tokens, targets))
    losses = []
    for _ in range(STEPS):
        params, loss = step(params, local)
        losses.append(np.asarray(loss))
    got = {f"p_{k}": np.asarray(v) for k, v in params.items()}
    got["losses"] = np.stack(losses)
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **got)
    print(f"rank {r}/{n} ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
