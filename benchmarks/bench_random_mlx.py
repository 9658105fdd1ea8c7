"""Random-bit throughput on MLX: measured side by side in one run (no timed assertions).

For 2**20 and 2**24 uint32 draws: jax.random.bits under rlx_jax.jit(backend="mlx") (threefry
as MLX uint32 ops, bit-exact with JAX; mx.compile'd, and with compile=False), the same under jax.jit (XLA on this machine's CPU),
the same threefry rounds hand-written as MLX uint32 ops (bit-exact too; compiled and eager),
and MLX's own generator (a different stream: not bit-exact, for scale): mx.random.bits where
the installed MLX exposes it, else mx.random.uniform (its bits plus a float conversion; the
Python API of mlx 0.32 has no mx.random.bits). Prints bits per second and the ratios. output="native" keeps the result an mx.array (no conversion).

Run: python benchmarks/bench_random_mlx.py [--quick]
"""
import argparse

import jax
import jax.numpy as jnp
import mlx.core as mx
import numpy as np

import rlx_jax

from bench_mlx import bench  # noqa: E402  (the median-of-n timer; benchmarks/ is on sys.path)


if hasattr(mx.random, "bits"):
    MLX_OWN, mlx_own = "mx.random.bits", lambda shape, key: mx.random.bits(shape, 4, key=key)
else:
    MLX_OWN, mlx_own = "mx.random.uniform", lambda shape, key: mx.random.uniform(
        shape=shape, key=key)


ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def hand_written_bits(k, count):
    """jax.random.bits(key, (count,), uint32) written directly as MLX uint32 ops: threefry-2x32's
    20 rounds on the counters (0, i) (jax_threefry_partitionable), the two words xor-ed."""
    k0, k1 = k[0], k[1]
    ks = (k0, k1, k0 ^ k1 ^ mx.array(0x1BD11BDA, mx.uint32))
    x = [mx.zeros((count,), mx.uint32) + ks[0], mx.arange(count, dtype=mx.uint32) + ks[1]]

    def rotl(v, r):
        return (v << r) | (v >> (32 - r))
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x[0] = x[0] + x[1]
            x[1] = rotl(x[1], r) ^ x[0]
        x[0] = x[0] + ks[(i + 1) % 3]
        x[1] = x[1] + ks[(i + 2) % 3] + mx.array(i + 1, mx.uint32)
    return x[0] ^ x[1]


def rates(count, n):
    """{name: seconds per draw of `count` uint32 values}."""
    def draw(key):
        return jax.random.bits(key, (count,), jnp.uint32)
    ours = rlx_jax.jit(draw, backend="mlx", output="native")
    eager = rlx_jax.jit(draw, backend="mlx", output="native", compile=False)
    ref = jax.jit(draw)
    key = jax.random.key(0)
    out = np.asarray(ours(key))
    np.testing.assert_array_equal(out, np.asarray(ref(key)))        # bit-exact first
    kdata = mx.array(np.asarray(jax.random.key_data(key)))
    hand = mx.compile(lambda k: hand_written_bits(k, count))
    np.testing.assert_array_equal(np.asarray(hand(kdata)), out)   # the same bits as JAX
    mkey = mx.random.key(0)
    return {
        "hand-written MLX threefry, mx.compile": bench(lambda: mx.eval(hand(kdata)), n, warm=2),
        "hand-written MLX threefry, eager": bench(
            lambda: mx.eval(hand_written_bits(kdata, count)), n, warm=2),
        "rlx_jax mlx": bench(lambda: mx.eval(ours(key)), n, warm=2),
        "rlx_jax mlx compile=False": bench(lambda: mx.eval(eager(key)), n, warm=2),
        "jax.jit (XLA CPU)": bench(lambda: ref(key).block_until_ready(), n, warm=2),
        MLX_OWN: bench(lambda: mx.eval(mlx_own((count,), key=mkey)), n, warm=2),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 3 if args.quick else 10
    print(f"MLX device: {mx.default_device()}; jax on {jax.devices()[0].platform}")
    for log2 in (20, 24):
        count = 2 ** log2
        t = rates(count, n)
        bits = 32 * count
        line = ", ".join(f"{k}: {bits / s / 1e9:.2f} Gbit/s ({s * 1e3:.1f} ms)"
                         for k, s in t.items())
        print(f"2**{log2} uint32 draws: {line}")
        ours = t["rlx_jax mlx"]
        print(f"  rlx_jax mlx / jax.jit: {t['jax.jit (XLA CPU)'] / ours:.2f}x the throughput; "
              f"/ {MLX_OWN}: {t[MLX_OWN] / ours:.2f}x; / hand-written MLX threefry: "
              f"{t['hand-written MLX threefry, mx.compile'] / ours:.2f}x (compiled), "
              f"{t['hand-written MLX threefry, eager'] / ours:.2f}x (eager)")


if __name__ == "__main__":
    main()
