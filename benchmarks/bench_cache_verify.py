"""What checking a cache entry against its content hash costs, next to what using the entry costs
anyway, measured side by side in one run.

Core ML: a cache hit checks the package (package_cache.problem: its record read, its files
hashed) and then loads it (milproto load + MIL reference executor construction, what
CoremlExecutable does on Linux). Printed for a small package and a 64 MB one (a 4096x4096
float32 weight constant): check ms, load ms, their ratio, and the same check with blake2b
instead of sha256 (cache.HASH). MLX: hashing one kernel library vs MLX's first call of the
program that loads it. Pattern cache: checking one pickled graph vs unpickling it.

Core ML figures are given twice: in new processes (what a cache hit costs: nothing is
remembered, the load allocates fresh memory for the weights) and in one process (min over rounds
of the median of interleaved calls; the load then reuses the memory freed by the one before, so
it is faster). Files are in the page cache (read cold, the check pays the disk read and the load
then finds the file cached).

Run: python benchmarks/bench_cache_verify.py [--dim 4096] [--rounds 5]
"""
import argparse
import os
import statistics
import tempfile

import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax import cache

from bench_mlx import bench  # noqa: E402  (the median-of-n timer; benchmarks/ is on sys.path)


def side_by_side(fns, n, rounds):
    """{name: seconds}: interleaved medians, min over rounds (reduces drift on a shared
    machine)."""
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], bench(fn, n, warm=0))
    return best


def package_of(dim_in, dim_out):
    w = np.random.default_rng(0).standard_normal((dim_in, dim_out)).astype(np.float32)
    x = np.ones((8, dim_in), np.float32)
    fn = rlx_jax.jit(lambda x: jnp.tanh(x @ w), backend="coreml", optimize="fast")
    return fn.lower(x).compile().executable.package_path


# One cache hit as a new process sees it: the check (nothing remembered yet), then the load;
# a small package is loaded first so that coremltools' lazy imports are not counted.
HIT = """
import os, sys, time
from rlx_jax import cache

from bench_mlx import bench  # noqa: E402  (the median-of-n timer; benchmarks/ is on sys.path)
from rlx_jax.backends.coreml.package import cache as package_cache
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
path, warm_up = sys.argv[1:3]
with package_cache.MIL_LOCK:
    MilReferenceExecutor(warm_up)
files = [os.path.join(path, rel) for rel in package_cache.package_files(path)]
t0 = time.perf_counter()
assert package_cache.problem(path) is None
t1 = time.perf_counter()
with package_cache.MIL_LOCK:
    MilReferenceExecutor(path)
t2 = time.perf_counter()
for f in files:
    cache.content_hash(f, "blake2b")
print(t1 - t0, t2 - t1, time.perf_counter() - t2)
"""


def fresh_process(path, warm_up, rounds):
    """{check, load, blake2b: seconds}, the medians over `rounds` new processes."""
    import subprocess
    import sys
    got = [list(map(float, subprocess.run(
        [sys.executable, "-c", HIT, path, warm_up], capture_output=True, text=True,
        check=True).stdout.split()[-3:])) for _ in range(rounds)]
    return dict(zip(("check", "load", "blake2b"), map(statistics.median, zip(*got))))


def coreml_rows(dims, rounds):
    from rlx_jax.backends.coreml.package import cache as package_cache
    from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
    rows = []
    warm_up = package_of(4, 4)
    for dim_in, dim_out in dims:
        path = package_of(dim_in, dim_out)
        files = [os.path.join(path, rel) for rel in package_cache.package_files(path)]
        size = sum(os.path.getsize(f) for f in files)

        def check():
            package_cache._CHECKED.forget(path)        # nothing remembered, as in a new process
            assert package_cache.problem(path) is None

        def blake2b():
            for f in files:
                cache.content_hash(f, "blake2b")

        def load():
            with package_cache.MIL_LOCK:
                MilReferenceExecutor(path)
        n = 3 if size > 1 << 24 else 20
        warm = side_by_side({"check": check, "blake2b": blake2b, "load": load}, n, rounds)
        rows.append((f"{dim_in}x{dim_out} f32", size, "new process",
                     fresh_process(path, warm_up, rounds)))
        rows.append(("", size, "in process", warm))
    print(f"\nCore ML package: check ({cache.HASH}) vs load (milproto + executor); 'new "
          f"process' is a cache hit's cost (median of {rounds} processes), 'in process' the "
          f"min of interleaved medians (the load reuses the memory of the one before)")
    print(f"{'package':>16} {'MB':>6} {'where':>12} {'check ms':>9} {'load ms':>9} "
          f"{'check/load':>10} {'blake2b ms':>10} {'blake2b/load':>12}")
    for name, size, where, t in rows:
        print(f"{name:>16} {size / 2**20:6.2f} {where:>12} {t['check'] * 1e3:9.2f} "
              f"{t['load'] * 1e3:9.2f} {t['check'] / t['load']:10.3f} "
              f"{t['blake2b'] * 1e3:10.2f} {t['blake2b'] / t['load']:12.3f}")


def mlx_row(rounds):
    import subprocess
    import sys
    from rlx_jax.backends.mlx import kernel_cache
    code = ("import time, numpy as np, jax.numpy as jnp, rlx_jax\n"
            "f = rlx_jax.jit(lambda x: jnp.tanh(x * 1.5) - jnp.cos(x) * 2, backend='mlx')\n"
            "x = np.ones((64, 64), np.float32)\n"
            "t0 = time.perf_counter(); f(x); print(time.perf_counter() - t0)\n")
    run = lambda: float(subprocess.run([sys.executable, "-c", code], capture_output=True,  # noqa
                                       text=True, check=True).stdout.split()[-1])
    run()                                                 # builds the kernel library
    libs = [os.path.join(d, n) for d, _, ns in os.walk(kernel_cache.kernel_root())
            for n in ns if n.endswith(".so")]
    if not libs:
        print("\nMLX: no kernel library was built (no g++?)")
        return
    first = min(run() for _ in range(rounds))            # a cache hit's first call

    def check():
        for lib in libs:
            kernel_cache._CHECKED.forget(lib)
            assert kernel_cache.library_problem(lib) is None
    t = side_by_side({"check": check}, 20, rounds)["check"]
    size = sum(os.path.getsize(p) for p in libs)
    print(f"\nMLX kernel libraries: {len(libs)} ({size / 1024:.1f} KB): check "
          f"{t * 1e3:.3f} ms vs first call of the cached program {first * 1e3:.1f} ms "
          f"(ratio {t / first:.4f})")


def pattern_row(rounds):
    import pickle
    from rlx_jax.passes import template_cache
    from rlx_jax.passes.pattern_refs import R
    ref = R["ln_vjp"]
    ex = ref.example(2)
    types = tuple((tuple(ex[n][0]), np.dtype(ex[n][1])) for n in ref.inputs)
    params = tuple(sorted(ref.params.items()))
    key = (ref.name, ref.inputs, types, params)
    template_cache.store(key, ref.trace(types, params))
    target = template_cache.path(key)
    with open(target, "rb") as f:
        data = f.read()
    payload = template_cache.checked_payload(target, data)
    t = side_by_side({"check": lambda: template_cache.checked_payload(target, data),
                      "unpickle": lambda: pickle.loads(payload)}, 200, rounds)
    print(f"\nPattern graph ({len(data)} bytes): check {t['check'] * 1e6:.1f} us vs unpickle "
          f"{t['unpickle'] * 1e6:.1f} us (ratio {t['check'] / t['unpickle']:.3f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault(cache.ENV, tempfile.mkdtemp(prefix="rlx_jax-bench-cache-"))
    print(f"cache: {os.environ[cache.ENV]}")
    coreml_rows([(64, 256), (args.dim, args.dim)], args.rounds)
    if "mlx" in rlx_jax.available_backends():
        mlx_row(args.rounds)
    pattern_row(args.rounds)


if __name__ == "__main__":
    main()
