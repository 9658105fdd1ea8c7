"""One process of tests/test_distributed.py, started by `mlx.launch`: runs every collective on
rank-dependent values and 5 data-parallel SGD steps of a small MLP, and saves what it got to
OUT/rank<r>.npz for the test to check against plain JAX."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import rlx_jax
from rlx_jax import distributed
from rlx_jax.errors import RlxError

STEPS, LR, GLOBAL_BATCH, D_IN, D_HID = 5, 0.1, 16, 6, 8


def mlp_problem():
    """(params, global inputs, global targets), the same in every process and in the test."""
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(D_IN, D_HID)).astype(np.float32) * 0.5,
              "b1": np.zeros(D_HID, np.float32),
              "w2": rng.normal(size=(D_HID, 1)).astype(np.float32) * 0.5}
    x = rng.normal(size=(GLOBAL_BATCH, D_IN)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    return params, x, y


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def sgd_step(params, batch, axis_name=None):
    loss, g = jax.value_and_grad(loss_fn)(params, batch)
    if axis_name is not None:
        g = lax.pmean(g, axis_name)
        loss = lax.pmean(loss, axis_name)
    return jax.tree.map(lambda p, d: p - LR * d, params, g), loss


def collectives(x):
    n = lax.psum(1, "batch")
    return {"psum": lax.psum(x, "batch"), "pmean": lax.pmean(x, "batch"),
            "pmax": lax.pmax(x, "batch"), "pmin": lax.pmin(x, "batch"),
            "gather": lax.all_gather(x, "batch"),
            "gather_tiled1": lax.all_gather(x, "batch", axis=1, tiled=True),
            "scatter": lax.psum_scatter(x, "batch", tiled=True),
            "index": lax.axis_index("batch"),
            "shift": lax.ppermute(x, "batch", [(i, (i + 1) % n) for i in range(n)]),
            "grad_psum": jax.grad(lambda v: lax.psum(jnp.sum(v ** 2), "batch"))(x)}


def rank_value(r, size):
    """The rank-dependent operand of `collectives` on rank r."""
    return (np.arange(size * 3, dtype=np.float32).reshape(size, 3) * (r + 1)
            + (-1) ** r * 10.0 * r)


def main(out_dir):
    distributed.initialize(backend="ring")
    r, n = distributed.rank(), distributed.size()
    got = {}
    outs = rlx_jax.jit(collectives, backend="mlx", axis_name="batch")(rank_value(r, n))
    got.update({f"c_{k}": np.asarray(v) for k, v in outs.items()})

    params, x, y = mlp_problem()
    step = rlx_jax.jit(lambda p, b: sgd_step(p, b, "batch"), backend="mlx", axis_name="batch")
    local = distributed.shard((x, y))
    for _ in range(STEPS):
        params, loss = step(params, local)
    got.update({f"p_{k}": np.asarray(v) for k, v in params.items()})
    got["loss"] = np.asarray(loss)
    for what, call in (("xla", lambda: rlx_jax.jit(collectives, backend="xla",
                                                    axis_name="batch")(rank_value(r, n))),
                       ("shard", lambda: distributed.shard(np.zeros((n * 2 + 1, 2))))):
        try:
            call()
            got[f"e_{what}"] = np.asarray("no error")
        except RlxError as e:
            got[f"e_{what}"] = np.asarray(f"{type(e).__name__}: {e}")
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **got)
    print(f"rank {r}/{n} ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
