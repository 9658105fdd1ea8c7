"""First-call latency on MLX, per stage, against jax.jit's first call of the same function, for
two training steps: the flax LM + optax Adam step of bench_recognize.py (its default sizes) and
a ResNet block step (flax Conv, BatchNorm in training mode, relu, residual; value_and_grad and
an optax Adam update).

Each measurement is a fresh process, so nothing cached in Python (jitted functions, traced
pattern templates, shape inference) carries over; the on-disk caches under RLX_JAX_CACHE_DIR
(MLX kernel libraries, traced pattern graphs, inferred types) are warm: the cache directory (a
temporary one, or RLX_JAX_CACHE_DIR when it is set, which keeps it for the next run: a first
fill builds every kernel with g++, minutes) is filled by one rlx_jax process per program
before anything is timed, and holds the processes' Python bytecode too (PYTHONPYCACHEPREFIX).
rlx_jax and jax.jit processes alternate, `--runs` of each per program.

Printed (never asserted), per program: the median ms of each stage over the runs and their
spread (min-max), and the ratio of the medians of the totals.
  rlx_jax (`Lowered.timings`, then the first call of the Compiled): make_jaxpr, frontend,
    recognize, legalize, lower (the MLX function and mx.compile's wrapper), first_run (the
    first call: argument conversion, mx.compile's trace, kernel libraries loaded from the
    cache, one step's compute, result conversion);
  jax.jit (its AOT stages): trace, lower (StableHLO), compile (XLA), first_run;
  and, for scale, one later step of each (the median of a few): the part of first_run that is
  compute. On this 2-core CPU MLX runs on a single-threaded reference BLAS, so rlx_jax's step
  is slower than XLA's and its first_run is mostly that step.

Run: python benchmarks/bench_first_call.py [--quick] [--runs N] [--programs lm,resnet]
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RLX_STAGES = ("make_jaxpr", "frontend", "recognize", "legalize", "lower", "first_run")
JAX_STAGES = ("trace", "lower", "compile", "first_run")


def lm(quick):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_recognize import make
    dims = dict(batch=2, seq=16, dim=32, heads=2, vocab=64, layers=1) if quick else \
        dict(batch=4, seq=64, dim=128, heads=4, vocab=512, layers=2)
    return make(**dims)


def resnet(quick, seed=0):
    """A ResNet stage (a stem conv, two residual blocks, global average pool, a classifier)
    trained by one optax Adam step, BatchNorm's statistics updated in training mode."""
    import flax.linen as fnn
    import jax
    import numpy as np
    import optax
    batch, size, width, blocks, classes = (2, 8, 8, 1, 10) if quick else (8, 16, 32, 2, 10)

    class Block(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            h = fnn.Conv(width, (3, 3), use_bias=False)(x)
            h = fnn.relu(fnn.BatchNorm(use_running_average=False)(h))
            h = fnn.Conv(width, (3, 3), use_bias=False)(h)
            return fnn.relu(x + fnn.BatchNorm(use_running_average=False)(h))

    class Net(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            x = fnn.relu(fnn.Conv(width, (3, 3))(x))
            for _ in range(blocks):
                x = Block()(x)
            return fnn.Dense(classes)(x.mean(axis=(1, 2)))

    model, opt = Net(), optax.adam(1e-3)
    r = np.random.default_rng(seed)
    images = r.standard_normal((batch, size, size, 3)).astype(np.float32)
    labels = r.integers(0, classes, (batch,)).astype(np.int32)
    variables = model.init(jax.random.PRNGKey(seed), images)
    params, stats = variables["params"], variables["batch_stats"]

    def loss(p, stats, images, labels):
        logits, new = model.apply({"params": p, "batch_stats": stats}, images,
                                  mutable=["batch_stats"])
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return ce, new["batch_stats"]

    def step(p, state, stats, images, labels):
        (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(p, stats, images, labels)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, stats, value
    return step, (params, opt.init(params), stats, images, labels)


PROGRAMS = {"lm": lm, "resnet": resnet}


def _later_step(call, args, n=3):
    """Median seconds of n more calls (each result waited for)."""
    import jax
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(call(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def child_rlx(step, args):
    import jax
    import rlx_jax
    lowered = rlx_jax.jit(step, backend="mlx").lower(*args)
    compiled = lowered.compile()
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    out = dict(lowered.timings, first_run=time.perf_counter() - t0)
    out["step"] = _later_step(compiled, args)
    return out


def child_jax(step, args):
    import jax
    t0 = time.perf_counter()
    traced = jax.jit(step).trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    return dict(trace=t1 - t0, lower=t2 - t1, compile=t3 - t2, first_run=t4 - t3,
                step=_later_step(compiled, args))


def child(which, program, quick):
    step, args = PROGRAMS[program](quick)
    got = (child_rlx if which == "rlx" else child_jax)(step, args)
    print(json.dumps(got))


def fresh(which, program, quick):
    """The stage seconds of one fresh process."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", which, "--programs", program]
    res = subprocess.run(cmd + ["--quick"] * quick, capture_output=True, text=True, check=False,
                         env=_child_env())
    if res.returncode:
        raise RuntimeError(f"{which} {program} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _child_env():
    """The children compile Python to bytecode once, under the cache directory, as an installed
    package has it (PYTHONDONTWRITEBYTECODE would make each import compile from source)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.environ["RLX_JAX_CACHE_DIR"], "pycache")
    return env


def summary(runs, stages):
    """{stage: (median, min, max) ms}, with "total" (the stages' sum per run) and "step"."""
    out = {}
    for k in stages + ("total", "step"):
        xs = [1e3 * (sum(r.get(s, 0.0) for s in stages) if k == "total" else r.get(k, 0.0))
              for r in runs]
        out[k] = (statistics.median(xs), min(xs), max(xs))
    return out


def show(name, s, stages):
    cells = "  ".join(f"{k} {s[k][0]:.0f} ({s[k][1]:.0f}-{s[k][2]:.0f})" for k in stages)
    print(f"  {name:<8} {cells}")
    m, lo, hi = s["total"]
    st = s["step"]
    print(f"  {'':<8} total {m:.0f} ms ({lo:.0f}-{hi:.0f}); a later step {st[0]:.1f} ms "
          f"({st[1]:.1f}-{st[2]:.1f})")


def report(program, rlx, jax_):
    r, j = summary(rlx, RLX_STAGES), summary(jax_, JAX_STAGES)
    print(f"\n== {program}: median ms (min-max) over {len(rlx)} fresh processes each ==")
    show("rlx mlx", r, RLX_STAGES)
    show("jax.jit", j, JAX_STAGES)
    ratios = sorted(a / b for a, b in zip(
        [sum(x.get(s, 0.0) for s in RLX_STAGES) for x in rlx],
        [sum(x.get(s, 0.0) for s in JAX_STAGES) for x in jax_]))
    before_run = sum(r[k][0] for k in RLX_STAGES[:-1])
    print(f"  first call rlx / jax.jit: {r['total'][0] / j['total'][0]:.2f}x (per run pair "
          f"{ratios[0]:.2f}-{ratios[-1]:.2f}); before the first run: rlx {before_run:.0f} ms "
          f"vs jax.jit {j['total'][0] - j['first_run'][0]:.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller programs, fewer runs")
    ap.add_argument("--runs", type=int, default=None, help="fresh processes per side (5)")
    ap.add_argument("--programs", default="lm,resnet")
    ap.add_argument("--child", choices=("rlx", "jax"), help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        return child(opts.child, opts.programs, opts.quick)
    runs = opts.runs or (3 if opts.quick else 5)
    programs = opts.programs.split(",")
    given = os.environ.get("RLX_JAX_CACHE_DIR")
    with contextlib.nullcontext(given) if given else \
            tempfile.TemporaryDirectory(prefix="rlx-first-call-") as d:
        os.environ["RLX_JAX_CACHE_DIR"] = d
        print(f"warm-up: one rlx_jax process per program fills {d}")
        for program in programs:
            fresh("rlx", program, opts.quick)
        for program in programs:
            got = {"rlx": [], "jax": []}
            for i in range(runs):                # alternating, the first side alternating too
                for which in (("rlx", "jax") if i % 2 == 0 else ("jax", "rlx")):
                    got[which].append(fresh(which, program, opts.quick))
            report(program, got["rlx"], got["jax"])


if __name__ == "__main__":
    main()
