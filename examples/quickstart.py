"""Quickstart: train a small MLP with jax.grad inside rlx_jax.jit.

    python examples/quickstart.py [--backend auto|mlx|coreml|xla] [--steps 200]

Synthetic regression data; the whole SGD step (forward, jax.grad, update) is one rlx_jax.jit
program. Prints the loss falling, then checks the compiled gradients against jax.grad.
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax


def init(rng, sizes=(8, 32, 32, 1)):
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def sgd_step(params, x, y, lr):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value


LR = 0.2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=200)
    opts = ap.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = np.sin(x[:, :2].sum(1, keepdims=True)).astype(np.float32)
    params = init(rng)

    step = rlx_jax.jit(sgd_step, backend=opts.backend)
    lowered = step.lower(params, x, y, LR)
    print(f"backend: {lowered.backend.name}   IR ops: {sum(lowered.op_counts().values())}")
    first = None
    for i in range(opts.steps):
        params, value = step(params, x, y, LR)
        value = float(np.asarray(value))
        first = value if first is None else first
        if i % max(1, opts.steps // 8) == 0 or i == opts.steps - 1:
            print(f"step {i:4d}  loss {value:.5f}")
    assert value < 0.5 * first, f"loss did not fall: {first:.4f} -> {value:.4f}"

    params = jax.tree.map(np.asarray, params)
    got = rlx_jax.jit(jax.grad(loss), backend=opts.backend)(params, x, y)
    want = jax.grad(loss)(params, x, y)
    err = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w))))
              for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
    print(f"max |grad - jax.grad| = {err:.2e}")
    assert err < 1e-4, "gradients differ from jax.grad"
    print("ok")


if __name__ == "__main__":
    main()
