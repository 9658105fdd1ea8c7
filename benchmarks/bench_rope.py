"""A LLaMA-style attention block (q, k, v projections of x[B, S, W], RoPE on q and k with x as
[B, S, H, D], jax.nn.dot_product_attention(is_causal=True), the output projection, a mean
square loss): its training step (jax.value_and_grad in the weights) with the rotary embedding
recognised as Rope / RopeBackward (passes/pattern_rope.py) against `recognize=False`, side by
side in one run on MLX.

Two ways of writing the tables, each its own row:
  - "tables in program": inv_freq = 1 / 10000**(arange(0, D, 2) / D), freqs = arange(S) ⊗
    inv_freq, cos / sin of the freqs concatenated twice (HF LLaMA): the frequency form, which
    the MLX rule lowers with mx.fast.rope (on Linux CPU MLX evaluates that op through its own
    composition of primitives; on Apple GPUs it is one kernel);
  - "tables as arguments": cos / sin [S, D] passed in: Rope takes them (MLX composition).
Recognition on turns the attention into Attention / AttentionBackward too, so each row has a
third program, recognition on without the RoPE patterns ("no-rope"): recognised / no-rope is
the RoPE kinds' own share. Printed (never asserted): Rope / RopeBackward nodes, IR ops, MLX
primitives, the median step time of each program measured interleaved (`output="native"`, the
arguments mx.arrays already) and the ratios; where Core ML is available, the step's MIL op
counts each way.

Run: python benchmarks/bench_rope.py [--quick] [--batch 4] [--seq 128] [--heads 4] [--dim 32]
"""
import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax.passes.pattern_rope import ROPE_PATTERNS
from rlx_jax.passes.pattern_table import PATTERNS

WAYS = ("recognised", "no-rope", "off")


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def llama_tables(seq, dim):
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def block_loss(p, x, cos, sin, heads):
    b, s, w = x.shape
    q, k, v = ((x @ p[n]).reshape(b, s, heads, w // heads) for n in "qkv")
    q, k = (t * cos[:, None] + rotate_half(t) * sin[:, None] for t in (q, k))
    a = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, s, w)
    return jnp.mean((x + a @ p["o"]) ** 2)


def programs(batch, seq, heads, dim, seed=0):
    """{row name: (training step, arguments)}."""
    r = np.random.RandomState(seed)
    width = heads * dim
    p = {n: (r.randn(width, width) / np.sqrt(width)).astype(np.float32) for n in "qkvo"}
    x = r.randn(batch, seq, width).astype(np.float32)
    cos, sin = (np.asarray(t) for t in llama_tables(seq, dim))

    def in_program(p, x):
        return block_loss(p, x, *llama_tables(x.shape[1], dim), heads)

    def as_arguments(p, x, cos, sin):
        return block_loss(p, x, cos, sin, heads)
    return {"tables in program": (jax.value_and_grad(in_program), (p, x)),
            "tables as arguments": (jax.value_and_grad(as_arguments), (p, x, cos, sin))}


def step_ms(call, args, runs):
    """The median of `runs` timed calls, in ms (outputs evaluated)."""
    import mlx.core as mx

    def once():
        t0 = time.perf_counter()
        mx.eval(jax.tree.leaves(call(*args)))
        return time.perf_counter() - t0
    return float(np.median([once() for _ in range(runs)])) * 1e3


def lower(step, args, way, **kw):
    """The step lowered `way`: "no-rope" lowers with ROPE_PATTERNS out of the table."""
    kept = list(PATTERNS)
    if way == "no-rope":
        PATTERNS[:] = [p for p in PATTERNS if p not in ROPE_PATTERNS]
    try:
        return rlx_jax.jit(step, recognize=way != "off", **kw).lower(*args)
    finally:
        PATTERNS[:] = kept


def mlx_row(name, step, args, runs, rounds):
    import mlx.core as mx
    margs = jax.tree.map(lambda a: mx.array(np.asarray(a)), args)
    lowered = {w: lower(step, args, w, backend="mlx", output="native") for w in WAYS}
    calls = {w: lo.compile() for w, lo in lowered.items()}
    for w in WAYS:
        step_ms(calls[w], margs, 2)                         # warm-up (kernel builds)
    times = {w: [] for w in WAYS}
    for _ in range(rounds):                                 # interleaved: drift hits all
        for w in WAYS:
            times[w].append(step_ms(calls[w], margs, runs))
    ms = {w: min(t) for w, t in times.items()}
    ir = {w: lo.op_counts() for w, lo in lowered.items()}
    print(f"  {name}: Rope/RopeBackward {ir['recognised'].get('Rope', 0)}/"
          f"{ir['recognised'].get('RopeBackward', 0)}")
    for w, lo in lowered.items():
        print(f"    {w:<11} IR ops {sum(ir[w].values()):4d}   MLX primitives "
              f"{sum(lo.op_counts(level='backend').values()):5d}   step {ms[w]:8.2f} ms")
    on = ms["recognised"]
    print(f"    ratios: recognised / off {on / ms['off']:.2f}, recognised / no-rope "
          f"{on / ms['no-rope']:.2f}")
    outs = {w: [np.asarray(v) for v in jax.tree.leaves(calls[w](*margs))] for w in WAYS}
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(outs["recognised"], outs["off"]))
    print(f"    max |recognised - off| over the loss and gradients: {err:.1e}")


def coreml_row(name, step, args):
    counts = {w: sum(lower(step, args, w, backend="coreml", optimize="fast")
                     .op_counts(level="backend").values()) for w in WAYS}
    print(f"  {name}: Core ML MIL ops " + ", ".join(f"{w} {c}" for w, c in counts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller block, fewer repetitions")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=32)
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    if opts.quick:
        opts.batch, opts.seq, opts.heads, opts.dim = 2, 32, 2, 16
    runs, rounds = (5, 2) if opts.quick else (15, 3)
    available = rlx_jax.available_backends()
    print(f"LLaMA-style attention block, training step: batch {opts.batch}, S {opts.seq}, "
          f"heads {opts.heads}, head dim {opts.dim} (recognised / recognize=False)")
    progs = programs(opts.batch, opts.seq, opts.heads, opts.dim)
    for name, (step, args) in progs.items():
        if "mlx" in available:
            mlx_row(name, step, args, runs, rounds)
        if "coreml" in available:
            coreml_row(name, step, args)


if __name__ == "__main__":
    main()
