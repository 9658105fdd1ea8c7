"""Train a tiny causal language model written with rlx_jax.nn inside rlx_jax.jit.

    python examples/train_transformer.py [--backend auto|mlx|coreml|xla] [--steps 60]
                                         [--native-backward | --no-native-backward]

Embedding, RMSNorm, rotary embeddings, causal attention and softmax cross-entropy, trained with
jax.value_and_grad and Adam written in jnp: the whole step (forward, backward, update) is one
rlx_jax.jit program. The data are synthetic sequences t[i+1] = (t[i] + step) % VOCAB with a step
per sequence, so the next token follows from the previous two. Prints the loss falling.
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax import nn

VOCAB, SEQ, DIM, HEADS, LAYERS, BATCH = 16, 12, 32, 2, 1, 16
LR, B1, B2, EPS = 1e-2, 0.9, 0.99, 1e-8


def init(rng):
    def dense(m, n):
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)
    layers = [{"g1": np.ones(DIM, np.float32), "wq": dense(DIM, DIM), "wk": dense(DIM, DIM),
               "wv": dense(DIM, DIM), "wo": dense(DIM, DIM), "g2": np.ones(DIM, np.float32),
               "w1": dense(DIM, 2 * DIM), "w2": dense(2 * DIM, DIM)} for _ in range(LAYERS)]
    return {"embed": dense(VOCAB, DIM), "layers": layers, "g": np.ones(DIM, np.float32),
            "out": dense(DIM, VOCAB)}


def heads(x):                                   # [B, S, D] -> [B, H, S, D/H]
    b, s, _ = x.shape
    return x.reshape(b, s, HEADS, DIM // HEADS).transpose(0, 2, 1, 3)


def model(params, tokens):
    x = params["embed"][tokens]                                        # embedding gather
    cos, sin = nn.rope_tables(SEQ, DIM // HEADS)
    for p in params["layers"]:
        h = nn.rms_norm(x, p["g1"])
        q, k, v = heads(h @ p["wq"]), heads(h @ p["wk"]), heads(h @ p["wv"])
        a = nn.attention(nn.rope(q, cos, sin), nn.rope(k, cos, sin), v, causal=True)
        x = x + a.transpose(0, 2, 1, 3).reshape(x.shape) @ p["wo"]
        x = x + nn.silu(nn.rms_norm(x, p["g2"]) @ p["w1"]) @ p["w2"]
    return nn.rms_norm(x, params["g"]) @ params["out"]


def loss_fn(params, tokens):
    logits = model(params, tokens[:, :-1])
    return jnp.mean(nn.softmax_cross_entropy_with_logits(logits, tokens[:, 1:]))


def train_step(params, m, v, t, tokens):
    """One Adam step; t is the (float) step number, from 1."""
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, grads)
    v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, grads)
    scale = LR * jnp.sqrt(1 - B2 ** t) / (1 - B1 ** t)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + EPS), params, m, v)
    return params, m, v, loss


def batch(rng):
    start = rng.integers(0, VOCAB, (BATCH, 1))
    step = rng.integers(1, 4, (BATCH, 1))
    return ((start + step * np.arange(SEQ + 1)) % VOCAB).astype(np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--native-backward", action=argparse.BooleanOptionalAction, default=True,
                    help="run backward kinds with the backend's native kernels (default) or "
                         "by their decompositions")
    opts = ap.parse_args()

    rng = np.random.default_rng(0)
    params = init(rng)
    m = jax.tree.map(np.zeros_like, params)
    v = jax.tree.map(np.zeros_like, params)
    step = rlx_jax.jit(train_step, backend=opts.backend, native_backward=opts.native_backward)
    lowered = step.lower(params, m, v, 1.0, batch(rng))
    counts = lowered.op_counts()
    backward = sorted(k for k in counts if "Backward" in k)
    print(f"backend: {lowered.backend.name}   native backward: {opts.native_backward}   "
          f"IR ops: {sum(counts.values())}   backward kinds kept: {backward or 'none'}")
    losses = []
    for i in range(opts.steps):
        params, m, v, loss = step(params, m, v, float(i + 1), batch(rng))
        losses.append(float(np.asarray(loss)))
        if i % max(1, opts.steps // 6) == 0 or i == opts.steps - 1:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    assert np.isfinite(losses).all(), "loss is not finite"
    assert last < 0.75 * first, f"loss did not fall: {first:.4f} -> {last:.4f}"
    print(f"loss {first:.4f} -> {last:.4f}")
    print("ok")


if __name__ == "__main__":
    main()
