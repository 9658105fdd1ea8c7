"""Recognition of 16-bit programs (templates per float dtype, passes/patterns.py VARIANTS),
measured side by side in one run.

1. The cost of the extra templates on a float32 program: recognition time of the float32 flax
   LM Adam step of bench_recognize.py (templates warm in this process: the steady cost every
   new program pays), median of repeated runs; a float32 program builds only the float32
   templates' index (the 16-bit ones are left out when the graph has no 16-bit values).
2. A bfloat16 flax transformer block (LayerNorm, MultiHeadDotProductAttention, RMSNorm, gelu
   MLP, dtype=bf16 with float32 parameters; and float16): IR ops of the forward and of its
   jax.grad, recognise on vs off per backend, MIL ops on Core ML (float16: a bfloat16 program
   is split around its host Casts), and the MLX time of the gradient step (interleaved rounds,
   median).

Printed, never asserted. Run: python benchmarks/bench_recognize_dtypes.py [--quick]
"""
import argparse
import os
import sys
import tempfile
import time

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax.passes.recognize import recognize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_recognize import make  # noqa: E402


def recognition_ms(step, args, repeats):
    graph = rlx_jax.trace(step, *args)
    recognize(graph)                                   # the templates, traced once
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        recognize(graph)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] * 1e3


def block(dtype, dim, heads, batch, seq):
    """(forward(p, x), grad(p, x), params, x) of a pre-norm transformer block at `dtype`."""
    class Block(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            h = fnn.LayerNorm(dtype=dtype)(x)
            x = x + fnn.MultiHeadDotProductAttention(num_heads=heads, dtype=dtype)(h, h)
            h = fnn.RMSNorm(dtype=dtype)(x)
            return x + fnn.Dense(dim, dtype=dtype)(
                jax.nn.gelu(fnn.Dense(4 * dim, dtype=dtype)(h)))
    m = Block()
    x = jnp.asarray(np.random.default_rng(0).normal(size=(batch, seq, dim)), dtype)
    p = m.init(jax.random.PRNGKey(0), x)
    fwd = lambda p, x: m.apply(p, x)                       # noqa: E731
    loss = lambda p, x: jnp.mean(jnp.square(fwd(p, x).astype(jnp.float32)))  # noqa: E731
    return fwd, jax.grad(loss, argnums=(0, 1)), p, x


def counts(fn, args, backend, rec, level="ir"):
    lowered = rlx_jax.jit(fn, backend=backend, recognize=rec).lower(*args)
    return lowered.op_counts() if level == "ir" else lowered.op_counts(level="backend")


def mlx_time(fn, args, runs, rounds):
    import mlx.core as mx
    jf = {rec: rlx_jax.jit(fn, backend="mlx", recognize=rec, output="native")
          for rec in (True, False)}
    mx_args = jax.tree.map(lambda a: mx.array(np.asarray(a)), args)
    for f in jf.values():
        mx.eval(f(*mx_args))
    best = {True: [], False: []}
    for _ in range(rounds):
        for rec, f in jf.items():
            ts = []
            for _ in range(runs):
                t0 = time.perf_counter()
                mx.eval(f(*mx_args))
                ts.append(time.perf_counter() - t0)
            best[rec].append(sorted(ts)[len(ts) // 2])
    return min(best[True]) * 1e3, min(best[False]) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller models, fewer repetitions")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    lm = dict(batch=2, seq=16, dim=32, heads=2, vocab=64, layers=1) if opts.quick else \
        dict(batch=4, seq=64, dim=128, heads=4, vocab=512, layers=2)
    step, args = make(**lm)
    print(f"float32 flax LM Adam step {lm}: recognition "
          f"{recognition_ms(step, args, 5 if opts.quick else 20):.1f} ms (median, warm)")
    dims = dict(dim=32, heads=2, batch=2, seq=16) if opts.quick else \
        dict(dim=128, heads=4, batch=4, seq=64)
    available = rlx_jax.available_backends()
    for dtype in (jnp.bfloat16, jnp.float16):
        fwd, grad, p, x = block(dtype, **dims)
        print(f"\n{jnp.dtype(dtype).name} flax transformer block {dims} (float32 parameters)")
        for name, fn in (("forward", fwd), ("grad", grad)):
            for backend in [b for b in ("mlx", "coreml") if b in available]:
                on, off = (counts(fn, (p, x), backend, rec) for rec in (True, False))
                kinds = sorted(k for k in on if k not in off)
                print(f"  {name:<8}{backend:<7} IR ops {sum(on.values()):5d} vs "
                      f"{sum(off.values()):5d} off (ratio "
                      f"{sum(on.values()) / sum(off.values()):.2f}); kinds {kinds}")
                if backend == "coreml" and dtype == jnp.bfloat16:
                    print(f"  {'':<15} MIL ops: none for the program as one (Core ML has no "
                          f"bfloat16: its bfloat16 Casts run on the host, between segments)")
                elif backend == "coreml":
                    on, off = (sum(counts(fn, (p, x), backend, rec, "backend").values())
                               for rec in (True, False))
                    print(f"  {'':<15} MIL ops {on:5d} vs {off:5d} off (ratio {on / off:.2f})")
        if "mlx" in available:
            on, off = mlx_time(grad, (p, x), 5 if opts.quick else 20, 3)
            print(f"  MLX grad step {on:.2f} ms vs {off:.2f} ms off (ratio {on / off:.2f})")


if __name__ == "__main__":
    main()
