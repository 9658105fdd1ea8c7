"""FFTs on Core ML as DFT matmuls (backends/coreml/passes/complex_dft.py): accuracy, size and time
against JAX's FFT, per transform length, side by side in one run.

For rfft (x: f32[B, n] -> its real and imaginary parts) and irfft (the parts of a half
spectrum -> f32[B, n]), both wholly on Core ML: the float32 error of the DFT lowering and of
`jax.jit(jnp.fft...)` against numpy's float64 FFT (max |error| / max |exact|), the MIL op
count, the matmul MFLOPs, the bytes of DFT constants in the model, and the time of one call
through the MIL reference executor (NumPy: not Core ML's speed) vs `jax.jit` on this CPU.
Lengths above complex_dft.MAX_LENGTH are forced onto the DFT lowering for the comparison.

    python benchmarks/bench_coreml_fft.py [--lengths 64,256,1024] [--batch 8]
"""
import argparse
import os
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx_fft_bench_"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlx_jax  # noqa: E402
from rlx_jax.backends.coreml.passes import complex_dft  # noqa: E402
from rlx_jax.ir.ops import OpKind as K  # noqa: E402

R = np.random.default_rng(0)


def rfft_parts(x):
    y = jnp.fft.rfft(x)
    return y.real, y.imag


def irfft_parts(n):
    return lambda re, im: jnp.fft.irfft(re + 1j * im, n=n)


def median_time(fn, args, reps):
    fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def err(got, exact):
    got = [np.asarray(g, np.float64) for g in jax.tree.leaves(got)]
    exact = jax.tree.leaves(exact)
    scale = max(np.max(np.abs(e)) for e in exact)
    return max(np.max(np.abs(g - e)) for g, e in zip(got, exact)) / scale


def sizes(lowered):
    """(MIL ops, matmul MFLOPs, bytes of Constants) of a lowered program."""
    g = lowered.legalized
    flops = sum(2 * int(np.prod(n.inputs[0].shape)) * n.inputs[1].shape[-1]
                for n in g.nodes if n.kind is K.MatMul)
    consts = sum(n.out.nbytes for n in g.nodes if n.kind is K.Constant)
    return sum(lowered.op_counts(level="backend").values()), flops / 1e6, consts


def row(name, n, fn, args, exact, reps):
    jitted = rlx_jax.jit(fn, backend="coreml", optimize="fast")
    lowered = jitted.lower(*args)
    assert not lowered.placement().host_ops(), lowered.placement()
    ops, mflop, consts = sizes(lowered)
    e_dft, e_jax = err(jitted(*args), exact), err(jax.jit(fn)(*args), exact)
    t_mil, t_jax = median_time(jitted, args, reps), median_time(jax.jit(fn), args, reps)
    print(f"{name:6s} {n:6d} {e_dft:9.1e} {e_jax:11.1e} {ops:8d} {mflop:8.2f} "
          f"{consts / 2**20:8.2f} MB {t_mil * 1e3:9.2f} {t_jax * 1e3:8.3f} {t_mil / t_jax:8.0f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="64,128,256,512,1024,2048,4096")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    lengths = [int(s) for s in a.lengths.split(",")]
    complex_dft.MAX_LENGTH = max(lengths)            # force the DFT for the comparison
    print(f"x: f32[{a.batch}, n]; error: max|y - exact| / max|exact| (exact: numpy float64)")
    print("kind        n   err DFT  err jnp.fft  MIL ops    MFLOP  constants   MIL ms   "
          "jax ms    ratio")
    for n in lengths:
        x = R.normal(size=(a.batch, n)).astype(np.float32)
        exact = np.fft.rfft(x.astype(np.float64))
        row("rfft", n, rfft_parts, (x,), (exact.real, exact.imag), a.reps)
        re, im = (R.normal(size=(a.batch, n // 2 + 1)).astype(np.float32) for _ in range(2))
        exact = np.fft.irfft(re.astype(np.float64) + 1j * im, n=n)
        row("irfft", n, irfft_parts(n), (re, im), exact, a.reps)


if __name__ == "__main__":
    main()
