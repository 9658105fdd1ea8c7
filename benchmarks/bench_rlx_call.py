"""Dispatch overhead of an rlx_jax.jit function called inside jax.jit (one `rlx_call`, lowered to a
host callback that runs the backend's executable) against the same function called directly
(a cached rlx_jax.jit call), side by side in one run.

Printed per backend and workload (never asserted): the median time per call of
  direct   f(x)                       the cached rlx_jax.jit call (output="jax")
  numpy    the same with output="numpy" (what the callback asks for: no jax.Array is made)
  in-jit   jax.jit(lambda x: f(x))(x) rlx_call through XLA's host callback
  xla      jax.jit(plain f)(x)        JAX alone, for scale
and the ratio in-jit / direct with the difference in microseconds. Rounds are interleaved and
the fastest round's median is kept, so drift on the shared machine hits every variant alike.

Run: python benchmarks/bench_rlx_call.py [--backends mlx,coreml,xla] [--quick]
"""
import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax

from bench_backward import (  # noqa: E402  (benchmarks/ is on sys.path)
    block_until_ready as ready, median_time)


def tiny(x):
    return x * 2.0 + 1.0


def mlp(x):
    w = jnp.full((x.shape[-1], x.shape[-1]), 0.01, x.dtype)
    return jnp.tanh(jnp.tanh(x @ w) @ w)


WORKLOADS = {"tiny x*2+1 f32[16]": (tiny, (16,)), "mlp 2x tanh(x@w) f32[64,64]": (mlp, (64, 64))}


def report(backend, name, fun, shape, runs, rounds):
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    f = rlx_jax.jit(fun, backend=backend)
    f_np = rlx_jax.jit(fun, backend=backend, output="numpy")
    in_jit, plain = jax.jit(lambda x: f(x) + 0.0), jax.jit(fun)
    calls = {"direct": lambda: f(x), "numpy": lambda: f_np(x), "in-jit": lambda: in_jit(x),
             "xla": lambda: plain(x)}
    for c in calls.values():                      # compile and warm every variant first
        ready(c())
    err = float(np.max(np.abs(np.asarray(calls["in-jit"]()) - np.asarray(calls["direct"]()))))
    best = {k: float("inf") for k in calls}
    for _ in range(rounds):
        for k, c in calls.items():
            best[k] = min(best[k], median_time(c, runs))
    d, n, j, a = best["direct"], best["numpy"], best["in-jit"], best["xla"]
    print(f"  {name:28s} direct {d * 1e6:8.1f} us  numpy {n * 1e6:8.1f} us  in-jit "
          f"{j * 1e6:8.1f} us  xla {a * 1e6:7.1f} us  in-jit/direct {j / d:5.2f} "
          f"({(j - d) * 1e6:+.1f} us)  in-jit/numpy {j / n:5.2f}  max|diff| {err:.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="mlx,coreml,xla")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    runs, rounds = (20, 2) if opts.quick else (200, 5)
    available = rlx_jax.available_backends()
    for backend in opts.backends.split(","):
        print(f"\n== {backend} ==")
        if backend not in available:
            print("  not available here")
            continue
        for name, (fun, shape) in WORKLOADS.items():
            report(backend, name, fun, shape, runs if backend != "coreml" else runs // 4 or 1,
                   rounds)


if __name__ == "__main__":
    main()
