"""Data-parallel training over processes: each process feeds its shard of the global batch, the
gradients are averaged with lax.pmean over the axis "batch" (mx.distributed.all_sum), and every
process ends with the parameters of single-process training on the whole batch (checked here
against plain JAX).

    mlx.launch --hosts 127.0.0.1 -n 2 --backend ring python examples/data_parallel.py
    mlx.launch -n 4 --backend ring python examples/data_parallel.py --steps 50
    mlx.launch --hostfile hosts.json --backend ring python examples/data_parallel.py
    python examples/data_parallel.py --backend xla     # one process: pmean is the identity
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax


def init(rng, sizes):
    return [{"w": rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a),
             "b": np.zeros(b, np.float32)} for a, b in zip(sizes[:-1], sizes[1:])]


def loss_fn(params, batch):
    x, y = batch
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def make_step(lr, axis_name):
    def step(params, batch):
        loss, g = jax.value_and_grad(loss_fn)(params, batch)
        if axis_name is not None:
            g, loss = jax.lax.pmean((g, loss), axis_name)
        return jax.tree.map(lambda p, d: p - lr * d, params, g), loss
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="mlx")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.5)
    args = ap.parse_args()

    group = rlx_jax.distributed.initialize()
    rank, size = group.rank(), group.size()
    rng = np.random.default_rng(0)                 # the same data and init on every process
    params = init(rng, [16, 32, 4])
    x = rng.normal(size=(args.global_batch, 16)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[(x[:, :4].argmax(axis=1))]

    step = rlx_jax.jit(make_step(args.lr, "batch"), backend=args.backend, axis_name="batch")
    local = rlx_jax.distributed.shard((x, y))
    p = params
    for i in range(args.steps):
        p, loss = step(p, local)
        if rank == 0 and (i % 5 == 0 or i == args.steps - 1):
            print(f"step {i:3d}  loss {float(loss):.4f}", flush=True)

    ref_step, q = jax.jit(make_step(args.lr, None)), params
    for _ in range(args.steps):
        q, ref_loss = ref_step(q, (x, y))
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(q)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    assert float(loss) < float(loss_fn(params, (x, y))), "the loss did not fall"
    if rank == 0:
        print(f"backend: {args.backend}, {size} process(es), local batch {len(local[0])}: "
              f"parameters match single-process training on the global batch")
        print("ok")


if __name__ == "__main__":
    main()
