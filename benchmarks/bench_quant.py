"""Quantized linear layers (DequantMatMul, passes/pattern_quant.py), recognised vs
`recognize=False` side by side in one run, on MLX: x [M, K] times an int8 per-channel weight
(x @ (q.astype(f32) * scale)) or an int4 weight packed two nibbles per byte with a scale and zero
per group of G rows, the weights closed over (constants: MLX re-packs them once, at lowering
time) or passed as arguments (re-packed in the program: a transpose of the bytes and scales).

Printed (never asserted): MLX primitives of each program and the median call time, measured
interleaved (`output="native"`, x an mx.array; argument weights are jax.Arrays, which the
recognised program packs once and the other converts at each call), with the ratio recognised /
off, for each batch size M (1: a decoding step); and, where Core ML is available, the MIL ops of the constant-weight
programs at an iOS18 target (constexpr_blockwise_shift_scale + matmul) and at iOS16.

Run: python benchmarks/bench_quant.py [--quick] [--m 64,1] [--k 1024] [--n 1024] [--group 64]
"""
import argparse
import os
import tempfile
import time

import jax.numpy as jnp
import numpy as np

import rlx_jax


def int8_linear(x, q, scale):
    return x @ (q.astype(x.dtype) * scale)


def int4_linear(x, q, scale, zero):
    k2, n = q.shape
    g = 2 * k2 // scale.shape[0]
    w = jnp.stack([q & 0xF, q >> 4], axis=1).reshape(2 * k2, n).astype(x.dtype)
    return x @ ((w.reshape(-1, g, n) - zero[:, None, :]) * scale[:, None, :]).reshape(2 * k2, n)


def layers(m, k, n, group, seed=0):
    r = np.random.RandomState(seed)
    x = r.randn(m, k).astype(np.float32)
    q8 = r.randint(-128, 128, (k, n)).astype(np.int8)
    s8 = r.uniform(0.001, 0.01, n).astype(np.float32)
    q4 = r.randint(0, 256, (k // 2, n)).astype(np.uint8)
    s4 = r.uniform(0.01, 0.05, (k // group, n)).astype(np.float32)
    z4 = r.uniform(0, 15, (k // group, n)).astype(np.float32)
    return x, {"int8 per channel": (int8_linear, (q8, s8)),
               f"int4 G={group}": (int4_linear, (q4, s4, z4))}


def variants(fn, x, weights):
    """(name, function, arguments) with the weights as constants and as arguments."""
    consts = [jnp.asarray(w) for w in weights]
    return [("constants", lambda x: fn(x, *consts), (x,)), ("arguments", fn, (x, *weights))]


def timed(compiled, args, runs):
    import mlx.core as mx
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        mx.eval(compiled(*args))
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def mlx(x, cases, runs, rounds):
    import mlx.core as mx
    print("\n== mlx ==")
    for label, (fn, weights) in cases.items():
        for how, f, args in variants(fn, x, weights):
            margs = [mx.array(args[0])] + [jnp.asarray(a) for a in args[1:]]   # x native,
            # the weights jax.Arrays, packed once (prepack.py)
            res = {}
            for rec in (True, False):
                jf = rlx_jax.jit(f, backend="mlx", recognize=rec, output="native")
                low = jf.lower(*margs)
                res[rec] = (low.compile(), low.op_counts("backend"))
                timed(res[rec][0], margs, 3)                         # builds kernels
            t = {True: [], False: []}
            for _ in range(rounds):                              # interleaved
                for rec in (True, False):
                    t[rec].append(timed(res[rec][0], margs, runs))
            on, off = min(t[True]) * 1e3, min(t[False]) * 1e3
            err = float(np.max(np.abs(np.asarray(res[True][0](*margs)) -
                                      np.asarray(res[False][0](*margs)))))
            print(f"  {label:<17} weights as {how:<9}  recognised {on:8.3f} ms   off "
                  f"{off:8.3f} ms   ratio {on / off:.2f}   max |on - off| {err:.1e}")
            print(f"      MLX primitives: {res[True][1]}\n      off: {res[False][1]}")


def coreml(x, cases):
    print("\n== coreml (MIL ops; on Linux the MIL reference executor runs them, so no times) ==")
    for label, (fn, weights) in cases.items():
        f, args = variants(fn, x, weights)[0][1:]
        for target in ("iOS18", "iOS16"):
            for rec in (True, False):
                low = rlx_jax.jit(f, backend="coreml", recognize=rec,
                                  minimum_deployment_target=target).lower(*args)
                place = low.placement()
                ops = low.op_counts("backend") if place.device_only else \
                    f"{len(place.host_ops())} ops on the host (uint8 bitwise ops)"
                print(f"  {label:<17} constants, {target}, recognize={rec!s:<5}: {ops}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller layer, fewer repetitions")
    ap.add_argument("--m", default="64,1", help="batch sizes, comma-separated")
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--group", type=int, default=64, choices=(32, 64, 128))
    ap.add_argument("--backends", default="mlx,coreml")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    ms, k, n = ([8], 256, 256) if opts.quick else \
        ([int(m) for m in opts.m.split(",")], opts.k, opts.n)
    runs, rounds = (5, 2) if opts.quick else (20, 3)
    available = rlx_jax.available_backends()
    for backend in opts.backends.split(","):
        for m in ms if backend == "mlx" else ms[:1]:
            x, cases = layers(m, k, n, opts.group)
            print(f"\nquantized linear layer x[{m}, {k}] @ W[{k}, {n}]")
            if backend not in available:
                print(f"== {backend} == not available here")
            elif backend == "mlx":
                mlx(x, cases, runs, rounds)
            else:
                coreml(x, cases)


if __name__ == "__main__":
    main()
