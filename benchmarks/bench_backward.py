"""Native vs decomposed backward kernels: one transformer-block training step (rlx_jax.nn
rms_norm, rope, causal attention, layer_norm, softmax cross-entropy; jax.value_and_grad + SGD)
compiled with native_backward=True and native_backward=False, side by side in one run.

Printed per backend (never asserted): IR op counts after legalization, backend op counts (MIL
ops for Core ML), compile time (trace + legalize + lower) and the run-time ratio, measured
interleaved. On Linux Core ML programs run on the MIL reference executor (Python, one MIL op at
a time), so there the run-time ratio mostly reflects the MIL op count.

Run: python benchmarks/bench_backward.py [--backends mlx,coreml] [--quick]
"""
import argparse
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax.errors import RlxError
from rlx_jax import nn


def make(batch, seq, dim, heads, vocab, seed=0):
    r = np.random.default_rng(seed)

    def dense(m, n):
        return (r.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)
    params = {"embed": dense(vocab, dim), "g1": np.ones(dim, np.float32),
              "wq": dense(dim, dim), "wk": dense(dim, dim), "wv": dense(dim, dim),
              "wo": dense(dim, dim), "g2": np.ones(dim, np.float32),
              "b2": np.zeros(dim, np.float32), "w1": dense(dim, 4 * dim),
              "w2": dense(4 * dim, dim), "out": dense(dim, vocab)}
    tokens = r.integers(0, vocab, (batch, seq + 1)).astype(np.int32)

    def split(x):
        b, s, _ = x.shape
        return x.reshape(b, s, heads, dim // heads).transpose(0, 2, 1, 3)

    def loss(p, tokens):
        x = p["embed"][tokens[:, :-1]]
        cos, sin = nn.rope_tables(seq, dim // heads)
        h = nn.rms_norm(x, p["g1"])
        q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
        a = nn.attention(nn.rope(q, cos, sin), nn.rope(k, cos, sin), v, causal=True)
        x = x + a.transpose(0, 2, 1, 3).reshape(x.shape) @ p["wo"]
        x = x + nn.gelu(nn.layer_norm(x, p["g2"], p["b2"]) @ p["w1"]) @ p["w2"]
        return jnp.mean(nn.softmax_cross_entropy_with_logits(x @ p["out"], tokens[:, 1:]))

    def step(p, tokens):
        value, grads = jax.value_and_grad(loss)(p, tokens)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), value
    return step, (params, tokens)


def block_until_ready(out):
    for leaf in jax.tree.leaves(out):
        np.asarray(leaf)


def median_time(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def compile_one(step, args, backend, native):
    t0 = time.perf_counter()
    jitted = rlx_jax.jit(step, backend=backend, native_backward=native)
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    block_until_ready(compiled(*args))
    first_s = time.perf_counter() - t1
    ir = lowered.op_counts()
    try:
        be = lowered.op_counts(level="backend")
    except RlxError:
        be = None
    return dict(compiled=compiled, compile_s=compile_s, first_s=first_s, ir=ir, backend=be,
                kept=sorted(k for k in ir if "Backward" in k))


def report(backend, step, args, runs, rounds):
    # one-time costs (imports, runtime start-up) are paid before either variant is timed
    block_until_ready(rlx_jax.jit(lambda x: x * 2 + 1, backend=backend)(np.ones(3, np.float32)))
    res = {native: compile_one(step, args, backend, native) for native in (True, False)}
    nat, dec = res[True], res[False]
    print(f"\n== {backend} ==")
    print(f"  backward kinds kept natively: {nat['kept'] or 'none'}")
    ir_n, ir_d = sum(nat["ir"].values()), sum(dec["ir"].values())
    print(f"  IR ops            native {ir_n:6d}   decomposed {ir_d:6d}   ratio {ir_n / ir_d:.2f}")
    if nat["backend"] is not None:
        be_n, be_d = sum(nat["backend"].values()), sum(dec["backend"].values())
        print(f"  backend ops       native {be_n:6d}   decomposed {be_d:6d}   "
              f"ratio {be_n / be_d:.2f}")
    print(f"  compile (s)       native {nat['compile_s']:6.2f}   decomposed "
          f"{dec['compile_s']:6.2f}   ratio {nat['compile_s'] / dec['compile_s']:.2f}")
    print(f"  first call (s)    native {nat['first_s']:6.3f}   decomposed {dec['first_s']:6.3f}"
          + ("   (includes mx.compile C++ code generation, cached across graphs)"
             if backend == "mlx" else ""))
    tn, td = [], []
    for _ in range(rounds):                              # interleaved: drift hits both alike
        tn.append(median_time(lambda: nat["compiled"](*args), runs))
        td.append(median_time(lambda: dec["compiled"](*args), runs))
    tn, td = min(tn), min(td)
    print(f"  step time (ms)    native {tn * 1e3:8.2f} decomposed {td * 1e3:8.2f} "
          f"  native/decomposed {tn / td:.2f}")
    got = [np.asarray(x) for x in jax.tree.leaves(nat["compiled"](*args))]
    ref = [np.asarray(x) for x in jax.tree.leaves(dec["compiled"](*args))]
    err = max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref))
    print(f"  max |native - decomposed| over the step's outputs: {err:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="mlx,coreml")
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer repetitions")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    dims = dict(batch=2, seq=16, dim=32, heads=2, vocab=64) if opts.quick else \
        dict(batch=4, seq=64, dim=128, heads=4, vocab=512)
    runs, rounds = (3, 2) if opts.quick else (5, 3)
    step, args = make(**dims)
    print(f"transformer block training step {dims}")
    available = rlx_jax.available_backends()
    for backend in opts.backends.split(","):
        if backend not in available:
            print(f"\n== {backend} == not available here")
            continue
        report(backend, step, args, runs, rounds)


if __name__ == "__main__":
    main()
