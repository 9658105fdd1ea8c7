"""Symbolic shapes, side by side in one run (ratios; nothing asserted).

(a) MLX: one jitted train step (a flax transformer block's value_and_grad and an SGD update)
    called at N distinct sequence lengths, each once, from fresh jitted functions:
      symbolic   rlx_jax.jit(polymorphic_shapes=[None, "b, t, 16"]): one trace, each size's
                 graph instantiated and lowered
      retrace    rlx_jax.jit with static shapes: a trace per size
      jax.jit    jax.jit (which retraces per size)
    and the first call alone: the symbolic trace against one static trace.
(b) Core ML: the block exported once with t flexible (RangeDim 1..512) against three static
    packages (t = 16, 64, 256): conversion time and size on disk.

Each MLX variant runs in a process of its own with an empty kernel cache (RLX_JAX_CACHE_DIR),
warmed up at two other lengths (imports and first-use costs), so no variant reuses kernels
another built.

Run: python benchmarks/bench_symbolic.py [--sizes N]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlx_jax  # noqa: E402


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.SelfAttention(num_heads=2, qkv_features=16)(nn.LayerNorm()(x))
        x = x + h
        return x + nn.Dense(16)(nn.gelu(nn.Dense(32)(nn.LayerNorm()(x))))


BLOCK = Block()
PARAMS = BLOCK.init(jax.random.PRNGKey(0), jnp.ones((1, 4, 16)))


def step(p, x):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(BLOCK.apply(p, x) ** 2))(p)
    return loss, jax.tree.map(lambda a, b: a - 0.01 * b, p, g)


def run_sizes(fn, lengths):
    """Seconds to call `fn` once at each length (results waited for)."""
    t0 = time.perf_counter()
    for t in lengths:
        x = np.random.RandomState(t).randn(2, t, 16).astype(np.float32)
        jax.block_until_ready(fn(PARAMS, x))
    return time.perf_counter() - t0


VARIANTS = {
    "symbolic": lambda: rlx_jax.jit(step, backend="mlx", polymorphic_shapes=[None, "b, t, 16"]),
    "retrace": lambda: rlx_jax.jit(step, backend="mlx"),
    "jax.jit": lambda: jax.jit(step),
}


def one_variant(name, n):
    """{"total", "first", "traces"} of variant `name` (in this process)."""
    lengths = list(range(3, 3 + 2 * n, 2))
    run_sizes(VARIANTS[name](), [2, 4])             # warm-up at other lengths
    fn = VARIANTS[name]()
    first = run_sizes(fn, lengths[:1])
    total = first + run_sizes(fn, lengths[1:])
    return {"total": total, "first": first, "traces": getattr(fn, "trace_count", None),
            "lengths": [lengths[0], lengths[-1]]}


def mlx_part(n):
    got = {}
    for name in VARIANTS:
        env = dict(os.environ, RLX_JAX_CACHE_DIR=tempfile.mkdtemp(prefix="rlx-bench-sym-"))
        out = subprocess.run([sys.executable, __file__, "--variant", name, "--sizes", str(n)],
                             env=env, check=True, capture_output=True, text=True).stdout
        got[name] = json.loads(out.strip().splitlines()[-1])
        shutil.rmtree(env["RLX_JAX_CACHE_DIR"], ignore_errors=True)
    lo, hi = got["retrace"]["lengths"]
    print(f"(a) MLX, {n} sequence lengths ({lo}..{hi}), batch 2, one call each")
    base = got["retrace"]["total"]
    for k, v in got.items():
        print(f"    {k:<10} {v['total']:8.2f} s  {v['total'] / base:.2f}x of retracing"
              + (f"  ({v['traces']} traces)" if v["traces"] is not None else ""))
    print(f"    first call: symbolic {got['symbolic']['first'] * 1e3:.0f} ms, static "
          f"{got['retrace']['first'] * 1e3:.0f} ms "
          f"({got['symbolic']['first'] / got['retrace']['first']:.2f}x)")


def _size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def coreml_part():
    tmp = tempfile.mkdtemp(prefix="rlx-bench-sym-pkg-")
    try:
        t, = jax.export.symbolic_shape("t", constraints=["t <= 512"])
        t0 = time.perf_counter()
        path = rlx_jax.export_coreml(BLOCK.apply, PARAMS, jax.ShapeDtypeStruct(
            (1, t, 16), jnp.float32), path=os.path.join(tmp, "flex.mlpackage"))
        flex_s, flex_b = time.perf_counter() - t0, _size(path)
        t0 = time.perf_counter()
        static_b = 0
        for n in (16, 64, 256):
            p = rlx_jax.export_coreml(BLOCK.apply, PARAMS, np.zeros((1, n, 16), np.float32),
                                      path=os.path.join(tmp, f"s{n}.mlpackage"))
            static_b += _size(p)
        static_s = time.perf_counter() - t0
        print("(b) Core ML export: one flexible package (t in 1..512) vs 3 static (t = 16, 64, "
              "256)")
        print(f"    conversion {flex_s:.2f} s vs {static_s:.2f} s ({flex_s / static_s:.2f}x); "
              f"size {flex_b / 1024:.0f} KiB vs {static_b / 1024:.0f} KiB "
              f"({flex_b / static_b:.2f}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, default=50)
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(one_variant(args.variant, args.sizes)))
        return
    mlx_part(args.sizes)
    coreml_part()


if __name__ == "__main__":
    main()
