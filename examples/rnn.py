"""A character-level RNN over synthetic text: lax.scan over time, trained with optax.

    python examples/rnn.py [--backend auto|mlx|coreml|xla] [--steps 60] [--seq 24]

The text repeats a short phrase with a little noise, so the next character is predictable. One
rlx_jax.jit program holds the whole step: the scan over time, its gradient (a reverse scan),
a `lax.fori_loop` that accumulates the gradients of two micro-batches, and optax's Adam update.
Prints the loss falling, then checks the compiled gradients against jax.grad.
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlx_jax

PHRASE = "the quick brown fox jumps over the lazy dog. "
VOCAB = sorted(set(PHRASE))
HIDDEN = 32


def make_text(rng, n):
    ids = np.array([VOCAB.index(c) for c in PHRASE * (n // len(PHRASE) + 1)][:n], np.int32)
    noise = rng.random(n) < 0.05
    ids[noise] = rng.integers(0, len(VOCAB), noise.sum())
    return ids


def init(rng):
    v, h = len(VOCAB), HIDDEN
    return {"emb": (rng.standard_normal((v, h)) * 0.3).astype(np.float32),
            "wh": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
            "b": np.zeros(h, np.float32),
            "out": (rng.standard_normal((h, v)) / np.sqrt(h)).astype(np.float32)}


def loss(params, tokens):
    """Mean next-character cross-entropy; tokens: [batch, time + 1] int32."""
    xs, ys = tokens[:, :-1].T, tokens[:, 1:].T           # time-major for the scan

    def cell(h, x):
        h = jnp.tanh(params["emb"][x] + h @ params["wh"] + params["b"])
        return h, h @ params["out"]
    h0 = jnp.zeros((tokens.shape[0], HIDDEN), jnp.float32)
    _, logits = jax.lax.scan(cell, h0, xs)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, ys[..., None], axis=-1))


OPT = optax.adam(3e-2)


def train_step(params, opt_state, micro):
    """Gradients of the micro-batches (micro: [k, batch, time + 1]) summed by a fori_loop."""
    def accumulate(i, acc):
        value, grads = jax.value_and_grad(loss)(params, micro[i])
        return acc[0] + value, jax.tree.map(jnp.add, acc[1], grads)
    zero = jax.tree.map(jnp.zeros_like, params)
    total, grads = jax.lax.fori_loop(0, micro.shape[0], accumulate, (0.0, zero))
    grads = jax.tree.map(lambda g: g / micro.shape[0], grads)
    updates, opt_state = OPT.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, total / micro.shape[0]


def batches(rng, text, steps, seq, batch=8, micro=2):
    for _ in range(steps):
        starts = rng.integers(0, len(text) - seq - 1, micro * batch)
        yield np.stack([text[s:s + seq + 1] for s in starts]).reshape(micro, batch, seq + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=24)
    opts = ap.parse_args()

    rng = np.random.default_rng(0)
    text = make_text(rng, 4096)
    params = init(rng)
    opt_state = OPT.init(params)
    step = rlx_jax.jit(train_step, backend=opts.backend)
    data = list(batches(rng, text, opts.steps, opts.seq))
    lowered = step.lower(params, opt_state, data[0])
    counts = lowered.op_counts()
    print(f"backend: {lowered.backend.name}   IR ops: {sum(counts.values())}   "
          f"Scan: {counts.get('Scan', 0)}")
    losses = []
    for i, micro in enumerate(data):
        params, opt_state, value = step(params, opt_state, micro)
        losses.append(float(np.asarray(value)))
        if i % max(1, opts.steps // 6) == 0 or i == opts.steps - 1:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    assert losses[-1] < 0.7 * losses[0], f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"

    got = rlx_jax.jit(jax.grad(loss), backend=opts.backend)(params, data[0][0])
    want = jax.grad(loss)(params, data[0][0])
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]),
                                   rtol=2e-3, atol=2e-4, err_msg=name)
    print("gradients match jax.grad")
    print("ok")


if __name__ == "__main__":
    main()
