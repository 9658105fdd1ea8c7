"""Recognition of jax.nn / flax / optax formulas (jit option `recognize`), on and off side by
side in one run: a flax LM (embedding, LayerNorm, causal MultiHeadDotProductAttention, gelu MLP,
optax softmax cross-entropy with integer labels) trained by one optax Adam step.

Printed (never asserted): IR ops after legalization, MIL ops (as built, and in the saved
.mlpackage after coremltools' pass pipeline) and compile time (trace + recognition +
legalization + MIL build + ct.convert; the pattern templates, traced once a process, about 1 s,
are traced before) on Core ML, and the MLX step time of a training loop, on and off measured
interleaved: `output="native"`, each step's parameters and optimizer state fed back as the MLX
arrays the previous step returned, as a training loop runs (so no argument or result
conversion is timed). On Linux Core ML programs run on the MIL reference executor, so only
Core ML's op counts and compile times are reported. The goals: >= 35% fewer MIL ops, MLX step
<= 0.8x.

Run: python benchmarks/bench_recognize.py [--quick] [--layers N]
"""
import argparse
import os
import tempfile
import time

import flax.linen as fnn
import jax
import numpy as np
import optax

import rlx_jax
from rlx_jax.passes.recognize import recognize


def make(batch, seq, dim, heads, vocab, layers, seed=0):
    class Block(fnn.Module):
        @fnn.compact
        def __call__(self, x, mask):
            h = fnn.LayerNorm()(x)
            x = x + fnn.MultiHeadDotProductAttention(num_heads=heads)(h, h, mask=mask)
            return x + fnn.Dense(dim)(jax.nn.gelu(fnn.Dense(4 * dim)(fnn.LayerNorm()(x))))

    class LM(fnn.Module):
        @fnn.compact
        def __call__(self, tokens):
            x, mask = fnn.Embed(vocab, dim)(tokens), fnn.make_causal_mask(tokens)
            for _ in range(layers):
                x = Block()(x, mask)
            return fnn.Dense(vocab)(fnn.LayerNorm()(x))

    model, opt = LM(), optax.adam(1e-3)
    r = np.random.default_rng(seed)
    tokens = r.integers(0, vocab, (batch, seq)).astype(np.int32)
    labels = r.integers(0, vocab, (batch, seq)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(seed), tokens)

    def loss(p, tokens, labels):
        logits = model.apply(p, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def step(p, state, tokens, labels):
        value, grads = jax.value_and_grad(loss)(p, tokens, labels)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value
    return step, (params, opt.init(params), tokens, labels)


def compile_one(step, args, backend, rec, **options):
    t0 = time.perf_counter()
    lowered = rlx_jax.jit(step, backend=backend, recognize=rec, **options).lower(*args)
    compiled = lowered.compile()
    seconds = time.perf_counter() - t0
    ir = lowered.op_counts()
    package = getattr(compiled.executable, "package_path", None)
    return dict(compiled=compiled, seconds=seconds, ir=sum(ir.values()), package=package,
                backend=sum(lowered.op_counts(level="backend").values()),
                kinds=sorted(k for k in ir if k[0].isupper() and k in KINDS))


KINDS = {"Softmax", "LayerNorm", "RmsNorm", "Attention", "AttentionBackward", "AdamUpdate",
         "LayerNormBackwardInput", "LayerNormBackwardGamma", "SoftmaxCrossEntropyWithLogits",
         "SoftmaxCrossEntropyBackward", "ActivationBackward", "GatherBackward"}


def row(what, on, off, fmt="{:8d}"):
    print(f"  {what:<18} recognize {fmt.format(on)}   off {fmt.format(off)}   "
          f"ratio {on / off:.2f}")


def coreml(step, args):
    rlx_jax.jit(lambda x: x * 2 + 1, backend="coreml")(np.ones(3, np.float32))   # warm-up
    res = {rec: compile_one(step, args, "coreml", rec) for rec in (True, False)}
    on, off = res[True], res[False]
    print(f"\n== coreml ==\n  kinds: {on['kinds']}")
    row("IR ops", on["ir"], off["ir"])
    row("MIL ops", on["backend"], off["backend"])
    row("MIL ops, saved", saved_ops(on["package"]), saved_ops(off["package"]))
    row("compile (s)", on["seconds"], off["seconds"], "{:8.2f}")
    print(f"  MIL ops: {100 * (1 - on['backend'] / off['backend']):.0f}% fewer (goal >= 35%)")


def saved_ops(package):
    """Operations (constants excluded) of the saved .mlpackage's main function."""
    import coremltools as ct
    spec = ct.models.MLModel(package, skip_model_load=True).get_spec()
    ops = spec.mlProgram.functions["main"].block_specializations.values()
    return sum(op.type != "const" for block in ops for op in block.operations)


def train_loop(compiled, args, steps):
    """Median seconds per step of `steps` steps, each fed the previous step's MLX results."""
    import mlx.core as mx
    params, state, tokens, labels = jax.tree.map(lambda a: mx.array(np.asarray(a)), args)
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        params, state, loss = compiled(params, state, tokens, labels)
        mx.eval(params, state, loss)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def mlx(step, args, runs, rounds):
    res = {rec: compile_one(step, args, "mlx", rec, output="native") for rec in (True, False)}
    on, off = res[True], res[False]
    print(f"\n== mlx ==\n  kinds: {on['kinds']}")
    row("IR ops", on["ir"], off["ir"])
    row("MLX primitives", on["backend"], off["backend"])
    row("compile (s)", on["seconds"], off["seconds"], "{:8.2f}")
    for r in (on, off):
        train_loop(r["compiled"], args, 2)
    t_on, t_off = [], []
    for _ in range(rounds):                               # interleaved: drift hits both alike
        t_on.append(train_loop(on["compiled"], args, runs))
        t_off.append(train_loop(off["compiled"], args, runs))
    row("step (ms)", min(t_on) * 1e3, min(t_off) * 1e3, "{:8.2f}")
    a = jax.tree.leaves(on["compiled"](*args))
    b = jax.tree.leaves(off["compiled"](*args))
    err = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))
    print(f"  max |on - off| over the step's outputs: {err:.2e} (Adam magnifies rounding "
          f"noise in gradients that are zero in exact arithmetic, e.g. the key bias)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer repetitions")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--backends", default="coreml,mlx")
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    dims = dict(batch=2, seq=16, dim=32, heads=2, vocab=64, layers=1) if opts.quick else \
        dict(batch=4, seq=64, dim=128, heads=4, vocab=512, layers=2)
    if opts.layers:
        dims["layers"] = opts.layers
    runs, rounds = (10, 3) if opts.quick else (5, 3)
    step, args = make(**dims)
    print(f"flax LM Adam training step {dims}")
    t0 = time.perf_counter()
    recognize(rlx_jax.trace(step, *args))
    print(f"first recognition in this process (traces the templates): "
          f"{time.perf_counter() - t0:.2f} s")
    available = rlx_jax.available_backends()
    for backend in opts.backends.split(","):
        if backend not in available:
            print(f"\n== {backend} == not available here")
        elif backend == "coreml":
            coreml(step, args)
        else:
            mlx(step, args, runs, rounds)


if __name__ == "__main__":
    main()
