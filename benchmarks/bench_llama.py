"""The LLaMA-style block of tests/llama_block.py (RMSNorm, RoPE, causal attention, SwiGLU;
bfloat16 activations, float32 master weights, optax.adamw under a warm-up + cosine schedule):
its training step recognised against `recognize=False`, side by side in one run.

Printed (never asserted): the recognised kinds, IR ops, the median step time on MLX of each
program measured interleaved (`output="native"`: each step's mx.array results fed back) and the
ratio; where Core ML is available, the MIL op counts each way (bfloat16="float32":
Core ML has no bfloat16 tensors).

Run: python benchmarks/bench_llama.py [--batch 4] [--seq 64] [--runs 15]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import mlx.core as mx

import rlx_jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.llama_block import make  # noqa: E402

KINDS = ("RmsNorm", "Rope", "Attention", "RmsNormBackwardInput", "RopeBackward",
         "AttentionBackward", "AdamUpdate")


def mlx_rows(step, args, runs):
    fns, state = {}, {}
    for rec in (True, False):
        jitted = rlx_jax.jit(step, backend="mlx", recognize=rec, output="native")
        low = jitted.lower(*args)
        counts = low.op_counts()
        print(f"  mlx recognize={rec}: {sum(counts.values())} IR ops; "
              + ", ".join(f"{k} {counts[k]}" for k in KINDS if k in counts))
        fns[rec], state[rec] = jitted, list(args)
        *out, _ = jitted(*args)                       # compile, build kernels
        state[rec] = [*out, *args[2:]]
    times = {True: [], False: []}
    for _ in range(runs):
        for rec in (True, False):
            t0 = time.perf_counter()
            *out, loss = fns[rec](*state[rec])
            mx.eval(loss)
            times[rec].append(time.perf_counter() - t0)
            state[rec] = [*out, *args[2:]]
    on, off = (statistics.median(times[r]) * 1e3 for r in (True, False))
    print(f"  mlx step, median of {runs}: recognised {on:.1f} ms, recognize=False "
          f"{off:.1f} ms: {on / off:.2f}x")


def coreml_row(step, args):
    ops = [sum(rlx_jax.jit(step, backend="coreml", recognize=rec, bfloat16="float32")
               .lower(*args).op_counts(level="backend").values()) for rec in (True, False)]
    print(f"  coreml MIL ops: recognised {ops[0]}, recognize=False {ops[1]}: "
          f"{ops[0] / ops[1]:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--runs", type=int, default=15)
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    step, args = make(opts.batch, opts.seq)
    print(f"LLaMA-style block training step, batch {opts.batch}, sequence {opts.seq}")
    available = rlx_jax.available_backends()
    if "mlx" in available:
        mlx_rows(step, args, opts.runs)
    if "coreml" in available:
        coreml_row(step, args)


if __name__ == "__main__":
    main()
