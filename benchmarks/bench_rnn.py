"""flax LSTM classifier (dense input -> nn.RNN(nn.LSTMCell(H)) -> last hidden state -> dense
logits): the Lstm kind (passes/recognize_rnn.py) against `recognize=False` (the Scan of the
cell's primitives), side by side in one run on MLX.

Printed (never asserted), per sequence length T: IR ops and MLX primitives of each program and
the median call time, measured interleaved (`output="native"`, the arguments mx.arrays already,
so no conversion is timed), with the ratio recognised / off, for
  - the inference call, weights closed over (Lstm: one recurrence in the compiled program;
    off: the Scan, unrolled into the compiled program while T x its body's size <= UNROLL_MAX,
    else a host loop over the compiled body, rules_control.py);
  - the training step, jax.value_and_grad of a cross-entropy loss with the weights as
    arguments (recognised: the forward is the Lstm node, yielding its gates' pre-activations
    and cell states too, the residuals JAX's autodiff reads elementwise functions of them,
    the backward JAX's Scan; off: both Scans).
Where Core ML is available, the MIL ops of both programs (inference: one `lstm` recognised, a
`while_loop` over the cell off; training: the weights are arguments, which MIL's `lstm` does not
take, so the Lstm lowers to its decomposition, a `while_loop`, beside the backward's).

Measured on a 2-core Linux machine shared with other work (MLX on the CPU, reference BLAS;
batch 16, features 32, hidden 64), recognised / off: inference T 16 ratio 0.90-0.92, T 64
0.62-0.83; training step IR ops 143 / 162 at both T, MIL ops 228 / 254, ratio 0.72-0.92 (T 16)
and 0.97-1.05 (T 64) over three runs. Before the Lstm yielded its gates (the residuals recomputed
from hs with the gates' matmuls again): IR ops 203 / 162 and 217 / 162, MIL ops 300 / 254 and
314 / 254, ratio 1.17 and 1.08. The backward Scan is the same host loop in both programs.

Run: python benchmarks/bench_rnn.py [--quick] [--batch 16] [--hidden 64] [--lengths 16,64]
"""
import argparse
import os
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax

CLASSES = 10


class Classifier(nn.Module):
    hidden: int
    features: int

    @nn.compact
    def __call__(self, x):
        hs = nn.RNN(nn.LSTMCell(self.hidden))(nn.Dense(self.features)(x))
        return nn.Dense(CLASSES)(hs[:, -1])


def programs(batch, length, features, hidden, seed=0):
    """{name: (function, arguments)} of the inference call and the training step."""
    r = np.random.RandomState(seed)
    x = r.randn(batch, length, features).astype(np.float32)
    labels = r.randint(0, CLASSES, batch).astype(np.int32)
    model = Classifier(hidden, features)
    params = model.init(jax.random.PRNGKey(seed), x)

    def loss(p, x, labels):
        logp = jax.nn.log_softmax(model.apply(p, x))
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))
    return {"inference": (lambda x: model.apply(params, x), (x,)),
            "training step": (jax.value_and_grad(loss), (params, x, labels))}


def median_call(compiled, args, runs):
    import mlx.core as mx
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        mx.eval(jax.tree.leaves(compiled(*args)))
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def mlx_row(name, fn, args, runs, rounds):
    import mlx.core as mx
    margs = jax.tree.map(lambda a: mx.array(np.asarray(a)), args)
    res = {}
    for rec in (True, False):
        lowered = rlx_jax.jit(fn, backend="mlx", recognize=rec, output="native").lower(*args)
        res[rec] = (lowered, lowered.compile())
    counts = {rec: (sum(lo.op_counts().values()), sum(lo.op_counts(level="backend").values()),
                    lo.op_counts().get("Lstm", 0)) for rec, (lo, _) in res.items()}
    for rec in res:
        median_call(res[rec][1], margs, 2)               # warm-up
    t = {True: [], False: []}
    for _ in range(rounds):                              # interleaved: drift hits both alike
        for rec in (True, False):
            t[rec].append(median_call(res[rec][1], margs, runs))
    on, off = min(t[True]) * 1e3, min(t[False]) * 1e3
    print(f"  {name:<14} Lstm nodes {counts[True][2]} / {counts[False][2]}   IR ops "
          f"{counts[True][0]:5d} / {counts[False][0]:5d}   MLX primitives {counts[True][1]:6d} / "
          f"{counts[False][1]:6d}   call {on:8.3f} ms / {off:8.3f} ms   ratio {on / off:.2f}")
    a = jax.tree.leaves(res[True][1](*margs))
    b = jax.tree.leaves(res[False][1](*margs))
    err = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))
    print(f"  {'':<14} max |recognised - off| over the outputs: {err:.1e}")


def coreml_row(name, fn, args):
    counts = {rec: rlx_jax.jit(fn, backend="coreml", recognize=rec, optimize="fast")
              .lower(*args).op_counts(level="backend") for rec in (True, False)}
    on, off = (sum(c.values()) for c in counts.values())
    print(f"  {'MIL ' + name:<14} recognised {on} ops (lstm {counts[True].get('lstm', 0)}), "
          f"off {off} ops (while_loop {counts[False].get('while_loop', 0)}), "
          f"ratio {on / off:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer repetitions")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lengths", default="16,64")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    if opts.quick:
        opts.batch, opts.features, opts.hidden, opts.lengths = 4, 8, 16, "8,40"
    runs, rounds = (5, 2) if opts.quick else (20, 3)
    available = rlx_jax.available_backends()
    for length in (int(v) for v in opts.lengths.split(",")):
        print(f"\nLSTM classifier: batch {opts.batch}, T {length}, features {opts.features}, "
              f"hidden {opts.hidden} (recognised / recognize=False)")
        progs = programs(opts.batch, length, opts.features, opts.hidden)
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
