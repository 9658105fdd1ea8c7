"""optax's dense-label softmax_cross_entropy (logits [batch, classes] against smoothed one-hot
labels): SoftmaxCrossEntropy / SoftmaxCrossEntropyDenseBackward (passes/pattern_xent.py)
against `recognize=False` (log_softmax and the product with the labels as primitives), side by
side in one run on MLX.

Printed (never asserted), per class count C: IR ops and MLX primitives of each program and the
median call time, measured interleaved (`output="native"`, the arguments mx.arrays already), with
the ratio recognised / off, for the loss alone and for jax.value_and_grad w.r.t. the logits;
the largest difference between the two programs' outputs; where Core ML is available, the MIL
op counts of both programs recognised and off.

Run: python benchmarks/bench_xent.py [--quick] [--batch 256] [--classes 1000,32000]
"""
import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlx_jax
from bench_rnn import median_call        # (this folder: the script's own, first on sys.path)

KINDS = ("SoftmaxCrossEntropy", "SoftmaxCrossEntropyDenseBackward")


def programs(batch, classes, seed=0):
    """{name: (function, arguments)}: the mean loss of logits [batch, classes] against smoothed
    one-hot labels, and its value_and_grad w.r.t. the logits."""
    r = np.random.RandomState(seed)
    logits = (r.randn(batch, classes) * 3).astype(np.float32)
    labels = np.asarray(optax.smooth_labels(jax.nn.one_hot(r.randint(0, classes, batch),
                                                           classes), 0.1), np.float32)

    def loss(logits, labels):
        return jnp.mean(optax.softmax_cross_entropy(logits, labels))
    return {"loss": (loss, (logits, labels)),
            "value_and_grad": (jax.value_and_grad(loss), (logits, labels))}


def mlx_row(name, fn, args, runs, rounds, kinds=KINDS):
    import mlx.core as mx
    margs = jax.tree.map(lambda a: mx.array(np.asarray(a)), args)
    lowered = {rec: rlx_jax.jit(fn, backend="mlx", recognize=rec, output="native").lower(*args)
               for rec in (True, False)}
    compiled = {rec: lo.compile() for rec, lo in lowered.items()}
    ir, prims, nodes = ({rec: sum(count(lo).values()) for rec, lo in lowered.items()}
                        for count in (lambda lo: lo.op_counts(),
                                      lambda lo: lo.op_counts(level="backend"),
                                      lambda lo: {k: lo.op_counts().get(k, 0) for k in kinds}))
    for c in compiled.values():
        median_call(c, margs, 2)                         # warm-up
    # interleaved rounds, so drift hits both programs alike
    times = [[median_call(compiled[rec], margs, runs) for rec in (True, False)]
             for _ in range(rounds)]
    on, off = (min(col) * 1e3 for col in zip(*times))
    print(f"  {name:<15} nodes {nodes[True]} / {nodes[False]}   IR ops {ir[True]:4d} / "
          f"{ir[False]:4d}   MLX primitives {prims[True]:4d} / {prims[False]:4d}   call "
          f"{on:8.3f} ms / {off:8.3f} ms   ratio {on / off:.2f}")
    got = [jax.tree.leaves(c(*margs)) for c in compiled.values()]
    f32 = [[np.asarray(v.astype(mx.float32)) for v in out] for out in got]   # bf16 too
    err = max(float(np.max(np.abs(x - y))) for x, y in zip(*f32))
    print(f"  {'':<15} max |recognised - off| over the outputs: {err:.1e}")


def coreml_row(name, fn, args):
    counts = {rec: rlx_jax.jit(fn, backend="coreml", recognize=rec, optimize="fast")
              .lower(*args).op_counts(level="backend") for rec in (True, False)}
    on, off = (sum(c.values()) for c in counts.values())
    print(f"  {'Core ML MIL':<15} {name}: recognised {on} ops, off {off} ops, "
          f"ratio {on / off:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--classes", default="1000,32000")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    if opts.quick:
        opts.batch, opts.classes = 32, "10,1000"
    runs, rounds = (5, 2) if opts.quick else (20, 3)
    available = rlx_jax.available_backends()
    for classes in (int(v) for v in opts.classes.split(",")):
        print(f"\ndense-label cross-entropy: batch {opts.batch}, classes {classes} "
              "(recognised / recognize=False)")
        progs = programs(opts.batch, classes)
        if "mlx" in available:
            for name, (fn, args) in progs.items():
                mlx_row(name, fn, args, runs, rounds)
        else:
            print("  mlx: not available here")
        if "coreml" in available:
            for name, (fn, args) in progs.items():
                coreml_row(name, fn, args)


if __name__ == "__main__":
    main()
