"""The cached call path, side by side in one run (ratios and differences; nothing asserted).

(a) dispatch: a tiny program (`v * 2 + 1`, f32[4]) called through rlx_jax.jit against the same
    function under raw `mx.compile` called with an mx.array and evaluated:
      native      output="native", mx.array in, evaluated
      numpy       output="numpy"
      jax         the default output, mx.array in
      jax fed     the default output, its own previous result (a jax.Array) fed back
      jax in      the default output, a jax.Array made by jnp fed in (copied into MLX)
      raw+jax     the floor of any jax.Array result: raw, then one jaxlib buffer made from
                  the evaluated result (jax_arrays.Converter, what the default output does)
      raw+jit     raw, then jax.jit of the same tiny function on a jax.Array: what running
                  any JAX work right after MLX costs here (the two runtimes' threads)
    and on xla: rlx_jax.jit(backend="xla") against jax.jit of the same function; on Core ML:
    the cached call against the executable's own predict on prepared feeds (on Linux the
    MIL reference executor: the figure is the call path's overhead, not Core ML's speed).
(b) a memory-bound training loop: 8 leaves of 4 MB updated `p - 0.01 * g`, the results fed
    back each step, output="jax" (the default) against output="native"; the default's extra
    time per step against numpy copying the same bytes once (into existing arrays, and into new
    ones as a jax.Array's copy is); whether the results alias MLX's
    memory, and the alignment of MLX's buffers here (jax aliases 64-byte aligned ones).

Rounds are interleaved and the fastest round's median is kept (drift on a shared machine hits
every variant alike); the spread is the range of the round medians.

The process is pinned to one core (Linux, `os.sched_setaffinity`) unless --all-cores is given:
an MLX evaluation hands the work to MLX's stream thread and waits for it, and on a machine with
a few cores that hand-off to another core costs 20-50 us, bimodally, per call (measured here:
raw `mx.compile` + `mx.eval` 14-19 us pinned with a spread of 0.1-4 us, 19-41 us on two cores
with a spread of 30-45 us), which would swamp the few microseconds the call path adds. Pinned,
the caller and the stream thread share the core and each call pays one context switch.

Run: python benchmarks/bench_dispatch.py [--quick] [--all-cores]
"""
import argparse
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import mlx.core as mx
import numpy as np

import rlx_jax
from rlx_jax import jax_arrays
from rlx_jax.backends.mlx.runtime import backing_array, to_numpy


def medians(calls, runs, rounds):
    """{name: [median seconds per call, one per round]} of callables run interleaved."""
    out = {k: [] for k in calls}
    for _ in range(rounds):
        for k, c in calls.items():
            c()
            ts = []
            for _ in range(runs):
                t0 = time.perf_counter()
                c()
                ts.append(time.perf_counter() - t0)
            out[k].append(statistics.median(ts))
    return out


def show(meds, base, unit=1e6, suffix="us"):
    b = min(meds[base])
    for k, v in meds.items():
        best, spread = min(v), max(v) - min(v)
        line = f"  {k:12s} {best * unit:9.1f} {suffix} (spread {spread * unit:6.1f})"
        if k != base:
            line += f"  {best / b:5.2f}x  {(best - b) * unit:+8.1f} {suffix} over {base}"
        print(line)


def tiny(v):
    return v * 2.0 + 1.0


def dispatch(runs, rounds):
    print("(a) dispatch, tiny program v * 2 + 1 on f32[4]")
    x = mx.array(np.ones(4, np.float32))
    raw = mx.compile(tiny)
    native = rlx_jax.jit(tiny, backend="mlx", output="native")
    as_numpy = rlx_jax.jit(tiny, backend="mlx", output="numpy")
    default = rlx_jax.jit(tiny, backend="mlx")
    xj = jnp.ones(4, jnp.float32)
    state = [default(xj)]
    convert, plain = jax_arrays.Converter(), jax.jit(tiny)

    def floor():
        out = raw(x)
        mx.eval(out)
        return convert([to_numpy(out)])
    calls = {"raw": lambda: mx.eval(raw(x)), "raw+jax": floor,
             "raw+jit": lambda: (mx.eval(raw(x)), plain(xj).block_until_ready()),
             "native": lambda: mx.eval(native(x)),
             "numpy": lambda: as_numpy(x), "jax": lambda: default(x),
             "jax fed": lambda: state.__setitem__(0, default(state[0])),
             "jax in": lambda: default(xj)}
    meds = medians(calls, runs, rounds)
    show(meds, "raw")
    print(f"  (jax fed back without a copy: {backing_array(state[0]) is not None}); the default "
          f"output over its floor raw+jax: {(min(meds['jax']) - min(meds['raw+jax'])) * 1e6:+.1f}"
          f" us")
    xla = rlx_jax.jit(tiny, backend="xla")
    meds = medians({"jax.jit": lambda: plain(xj).block_until_ready(),
                    "xla": lambda: xla(xj).block_until_ready()}, runs, rounds)
    show(meds, "jax.jit")
    coreml = rlx_jax.jit(tiny, backend="coreml")
    coreml(xj)
    exe = next(iter(coreml._cache.values())).executable
    inner = getattr(exe, "executable", exe)
    feeds = {inner.input_names[0]: np.ones(4, np.float32)}
    meds = medians({"predict": lambda: inner._predict(feeds), "coreml": lambda: coreml(xj)},
                   max(runs // 10, 5), rounds)
    show(meds, "predict")


def _update(p, g):
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g)


def memory_bound(runs, rounds, steps=4):
    n, leaves = 1 << 20, 8
    print(f"(b) memory-bound update, {leaves} leaves x {n * 4 >> 20} MB fed back, {steps} steps")
    init = [np.full(n, i, np.float32) for i in range(leaves)]
    loops = {}
    for output in ("native", "jax"):
        step = rlx_jax.jit(_update, backend="mlx", output=output)
        p0 = [mx.array(a) for a in init] if output == "native" else \
            rlx_jax.jit(lambda p: [a + 0 for a in p], backend="mlx")(init)
        g = [mx.array(a) for a in init]

        def loop(step=step, p0=p0, g=g):
            p = p0
            for _ in range(steps):
                p = step(p, g)
            mx.eval(p) if isinstance(p[0], mx.array) else jax.block_until_ready(p)
            return p
        loops[output] = loop
    out = loops["jax"]()
    src = [to_numpy(backing_array(a)) for a in out]
    aliased = sum(jax_arrays.shares_memory(a, s) for a, s in zip(out, src))
    dst = [np.empty(n, np.float32) for _ in range(leaves)]
    calls = dict(loops)
    calls["numpy copy"] = lambda: [[np.copyto(d, s) for d, s in zip(dst, src)]
                                   for _ in range(steps)]
    calls["numpy new"] = lambda: [[s.copy() for s in src] for _ in range(steps)]
    meds = medians(calls, runs, rounds)
    native, default, copy, new = (min(meds[k]) for k in ("native", "jax", "numpy copy",
                                                         "numpy new"))
    show(meds, "native", 1e3, "ms")
    print(f"  default's extra time over numpy copying the same {leaves * n * 4 * steps >> 20} MB:"
          f" {(default - native) / copy:5.2f}x into existing arrays, "
          f"{(default - native) / new:5.2f}x into new ones;  results aliasing MLX memory: "
          f"{aliased} of {leaves}")
    bufs = [mx.ones((k,)) for k in (1, 4, 100, 1000, 1 << 16, 1 << 20) for _ in range(8)]
    mx.eval(bufs)
    addrs = [to_numpy(b).ctypes.data for b in bufs]
    print(f"  MLX buffers 64-byte aligned here: {sum(a % 64 == 0 for a in addrs)} of "
          f"{len(addrs)} (address mod 64: {sorted({a % 64 for a in addrs})})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--all-cores", action="store_true",
                    help="do not pin the process to one core")
    opts = ap.parse_args()
    if not opts.all_cores and hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        print(f"pinned to core {core} (--all-cores: every core)")
    else:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "all"
        print(f"cores: {cores}")
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    runs, rounds = (200, 3) if opts.quick else (2000, 7)
    dispatch(runs, rounds)
    memory_bound(max(runs // 200, 3), rounds)


if __name__ == "__main__":
    main()
