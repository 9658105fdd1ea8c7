"""Control flow on MLX: a 256-step tanh RNN, forward + backward (jax.value_and_grad of a
lax.scan), measured side by side in one run (no timed assertions).

- rlx_jax host loop: the default for this length (length x body nodes > UNROLL_MAX): Python
  drives the loop over the scan bodies, each mx.compile'd;
- rlx_jax unrolled: the same program with UNROLL_MAX raised, the scans unrolled into one
  mx.compile'd graph;
- hand-written MLX: a Python loop over an mx.compile'd cell, differentiated by
  mx.value_and_grad (what one would write by hand);
- jax.jit: compile (first call) time, for scale.

Compile = the first call (trace + legalize + lower + mx.compile + kernel build + run). rlx_jax's
kernels go to $RLX_JAX_CACHE_DIR when set, else a fresh directory (cold: g++ builds them); run
twice with the same RLX_JAX_CACHE_DIR for warm figures. The hand-written cell's kernels go to
MLX's own $TMPDIR/mlx (warm after a first run). Step = min over rounds of the median time of a
call, results evaluated.

Run: python benchmarks/bench_control_mlx.py [--steps 256] [--hidden 64] [--batch 8]
"""
import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import mlx.core as mx
import numpy as np
from jax import lax

import rlx_jax
from rlx_jax.backends.mlx import rules_control


from bench_mlx import bench  # noqa: E402  (the median-of-n timer; benchmarks/ is on sys.path)


def rnn_loss(w, u, xs):
    def cell(h, x):
        h = jnp.tanh(x @ u + h @ w)
        return h, jnp.sum(h * h)
    h, ys = lax.scan(cell, jnp.zeros((xs.shape[1], w.shape[0]), xs.dtype), xs)
    return jnp.sum(h) + jnp.sum(ys)


def rnn_loss_mlx(cell):
    def loss(w, u, xs):
        h = mx.zeros((xs.shape[1], w.shape[0]), xs.dtype)
        total = mx.array(0.0)
        for t in range(xs.shape[0]):
            h, y = cell(w, u, h, xs[t])
            total = total + y
        return mx.sum(h) + total
    return loss


def first_call(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()
    if not os.environ.get("RLX_JAX_CACHE_DIR"):
        os.environ["RLX_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_control_mlx_")
    r = np.random.RandomState(0)
    w = (r.randn(a.hidden, a.hidden) * 0.3 / np.sqrt(a.hidden)).astype(np.float32)
    u = (r.randn(a.hidden, a.hidden) / np.sqrt(a.hidden)).astype(np.float32)
    xs = r.randn(a.steps, a.batch, a.hidden).astype(np.float32)
    grad = jax.value_and_grad(rnn_loss, argnums=(0, 1))
    mw, mu, mxs = mx.array(w), mx.array(u), mx.array(xs)

    results, plans = {}, {}
    default_max = rules_control.UNROLL_MAX
    for name, unroll_max in (("rlx host loop", default_max), ("rlx unrolled", 10 ** 9)):
        rules_control.UNROLL_MAX = unroll_max
        f = rlx_jax.jit(grad, backend="mlx", output="native")
        compile_s = first_call(lambda: mx.eval(f(mw, mu, mxs)))
        exe = next(iter(f._cache.values())).executable
        plans[name] = (sorted({p[2] for p in exe.plan}), exe.runtime)
        results[name] = [compile_s, None, f]
    rules_control.UNROLL_MAX = default_max

    @mx.compile
    def cell(w, u, h, x):
        h = mx.tanh(x @ u + h @ w)
        return h, mx.sum(h * h)
    hand = mx.value_and_grad(rnn_loss_mlx(cell), argnums=(0, 1))
    results["hand-written MLX"] = [first_call(lambda: mx.eval(hand(mw, mu, mxs))), None, hand]

    jitted = jax.jit(grad)
    jax_compile = first_call(lambda: jax.block_until_ready(jitted(w, u, xs)))
    jax_step = bench(lambda: jax.block_until_ready(jitted(w, u, xs)), a.calls)

    for _ in range(3):                     # interleaved rounds, the minimum kept
        for name, entry in results.items():
            fn = entry[2]
            t = bench(lambda: mx.eval(fn(mw, mu, mxs)), a.calls, warm=1)
            entry[1] = t if entry[1] is None else min(entry[1], t)

    # agreement with JAX
    want = jitted(w, u, xs)
    for name, (_, _, fn) in results.items():
        got = fn(mw, mu, mxs)
        loss, (gw, gu) = got
        np.testing.assert_allclose(np.asarray(loss), want[0], rtol=1e-3)
        np.testing.assert_allclose(np.asarray(gw), want[1][0], rtol=2e-3, atol=1e-3)

    print(f"{a.steps}-step tanh RNN, hidden {a.hidden}, batch {a.batch}: forward + backward "
          f"(value_and_grad), MLX {mx.__version__} on {mx.default_device()}, kernel cache "
          f"{os.environ['RLX_JAX_CACHE_DIR']}")
    for name, (p, runtime) in plans.items():
        print(f"  {name}: scans lowered as {p}, runtime {runtime}")
    hand_compile, hand_step = results["hand-written MLX"][:2]
    print(f"{'':20s} {'compile (1st call)':>19s} {'step':>10s} {'step / hand':>12s} "
          f"{'compile / jax.jit':>18s}")
    for name, (c, s, _) in results.items():
        print(f"{name:20s} {c * 1e3:16.0f} ms {s * 1e3:7.2f} ms {s / hand_step:11.2f}x "
              f"{c / jax_compile:17.2f}x")
    print(f"{'jax.jit (XLA CPU)':20s} {jax_compile * 1e3:16.0f} ms {jax_step * 1e3:7.2f} ms")
    host, unrolled = results["rlx host loop"], results["rlx unrolled"]
    print(f"unrolled / host loop: compile {unrolled[0] / host[0]:.2f}x, "
          f"step {unrolled[1] / host[1]:.2f}x")


if __name__ == "__main__":
    main()
