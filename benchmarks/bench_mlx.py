"""MLX backend benchmark: ratios measured side by side in one run (no timed assertions).

(a) lowering overhead: rlx_jax.jit(..., backend="mlx") vs the same model hand-written in MLX
    with mx.compile (MLP forward+backward, a transformer block forward, a small CNN forward);
(b) dispatch overhead: a cached call on a tiny input vs a raw mx.compile'd call;
(c) compile latency: trace + legalize + lower + first run vs jax.jit's first call, for programs
    of ~1,000 and ~10,000 jaxpr equations;
(d) result kinds: an MLP training loop feeding its parameters back, output="jax" (the default,
    jax.Arrays that remember their mx.array) vs output="native" (mx.arrays), and what making
    one jax.Array from an mx.array costs by size.
(a) and (b) use output="native": they measure the MLX program, not the result conversion.

Run: python benchmarks/bench_mlx.py [--quick]
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


def bench(fn, n, warm=3):
    """Median seconds per call of fn() (which must evaluate its result)."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def side_by_side(a, b, n, rounds=5):
    """Interleaved medians of two callables (reduces drift on a shared machine)."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(bench(a, n, warm=1))
        tb.append(bench(b, n, warm=1))
    return min(ta), min(tb)


# ---- (a) models, written once in JAX and once by hand in MLX ----
def mlp_jax(p, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)
    return jax.value_and_grad(loss)(p)


def mlp_mlx(p, x, y):
    def loss(p):
        h = mx.maximum(x @ p["w1"] + p["b1"], 0)
        return mx.mean(mx.square(h @ p["w2"] + p["b2"] - y))
    return mx.value_and_grad(loss)(p)


def _ln(x, g, b, mod):
    m = mod.mean(x, axis=-1, keepdims=True)
    v = mod.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / mod.sqrt(v + 1e-5) * g + b


def block_jax(p, x):
    B, S, D = x.shape
    H = 4
    h = _ln(x, p["g1"], p["b1"], jnp)
    q, k, v = [(h @ p[n]).reshape(B, S, H, D // H).transpose(0, 2, 1, 3) for n in "qkv"]
    a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H), axis=-1) @ v
    x = x + a.transpose(0, 2, 1, 3).reshape(B, S, D) @ p["o"]
    h = _ln(x, p["g2"], p["b2"], jnp)
    return x + jax.nn.gelu(h @ p["f1"]) @ p["f2"]


def block_mlx(p, x):
    B, S, D = x.shape
    H = 4
    h = _ln(x, p["g1"], p["b1"], mx)
    q, k, v = [(h @ p[n]).reshape(B, S, H, D // H).transpose(0, 2, 1, 3) for n in "qkv"]
    a = mx.softmax(q @ k.transpose(0, 1, 3, 2) / float(np.sqrt(D // H)), axis=-1) @ v
    x = x + a.transpose(0, 2, 1, 3).reshape(B, S, D) @ p["o"]
    h = _ln(x, p["g2"], p["b2"], mx)
    u = h @ p["f1"]
    g = 0.5 * u * (1 + mx.tanh(float(np.sqrt(2 / np.pi)) * (u + 0.044715 * u ** 3)))
    return x + g @ p["f2"]


def cnn_jax(p, x):
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME",
                                                 dimension_numbers=dn))
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(jax.lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME",
                                                 dimension_numbers=dn))
    return h.mean((1, 2)) @ p["d"]


def cnn_mlx(p, x):
    h = mx.maximum(mx.conv2d(x, p["c1m"], padding=1), 0)
    N, H, W, C = h.shape
    h = h.reshape(N, H // 2, 2, W // 2, 2, C).max(axis=(2, 4))
    h = mx.maximum(mx.conv2d(h, p["c2m"], padding=1), 0)
    return h.mean((1, 2)) @ p["d"]


def models():
    r = np.random.RandomState(0)

    def w(*s):
        return (r.randn(*s) / np.sqrt(s[0])).astype(np.float32)
    mlp_p = {"w1": w(128, 256), "b1": np.zeros(256, np.float32), "w2": w(256, 10),
             "b2": np.zeros(10, np.float32)}
    mlp_args = (r.randn(64, 128).astype(np.float32), r.randn(64, 10).astype(np.float32))
    D = 128
    blk = {n: w(D, D) for n in "qkvo"}
    blk.update(g1=np.ones(D, np.float32), b1=np.zeros(D, np.float32), g2=np.ones(D, np.float32),
               b2=np.zeros(D, np.float32), f1=w(D, 4 * D), f2=w(4 * D, D))
    cnn = {"c1": w(3, 3, 3, 16), "c2": w(3, 3, 16, 32), "d": w(32, 10)}
    cnn_h = dict(cnn, c1m=np.transpose(cnn["c1"], (3, 0, 1, 2)),
                 c2m=np.transpose(cnn["c2"], (3, 0, 1, 2)))
    return [
        ("MLP fwd+bwd (64x128x256x10)", mlp_jax, mlp_mlx, mlp_p, mlp_p, mlp_args),
        ("transformer block fwd (1x64x128, 4 heads)", block_jax, block_mlx, blk, blk,
         (r.randn(1, 64, D).astype(np.float32),)),
        ("CNN fwd (8x16x16x3, 2 conv + pool)", cnn_jax, cnn_mlx, cnn, cnn_h,
         (r.randn(8, 16, 16, 3).astype(np.float32),)),
    ]


def to_mx(tree):
    return jax.tree.map(mx.array, tree)


def lowering_overhead(n):
    print("(a) lowering overhead: rlx_jax.jit(backend='mlx') vs hand-written MLX + mx.compile")
    for name, fj, fm, pj, pm, args in models():
        rlx = rlx_jax.jit(fj, backend="mlx", output="native")
        hand = mx.compile(fm)
        pj_m, pm_m, args_m = to_mx(pj), to_mx(pm), to_mx(args)
        ref = jax.jit(fj)(pj, *args)
        got = rlx(pj_m, *args_m)
        err = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w))))
                  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(ref)))
        t_rlx, t_hand = side_by_side(lambda: mx.eval(rlx(pj_m, *args_m)),
                                     lambda: mx.eval(hand(pm_m, *args_m)), n)
        nodes = sum(rlx.lower(pj_m, *args_m).op_counts().values())
        print(f"  {name:44s} rlx {t_rlx * 1e3:8.3f} ms  hand {t_hand * 1e3:8.3f} ms  "
              f"ratio {t_rlx / t_hand:5.2f}x  (IR nodes {nodes}, max|err| vs jax {err:.1e})")


def dispatch_overhead(n):
    print("(b) dispatch overhead: cached call on a tiny input vs a raw mx.compile'd call")
    x = mx.array(np.ones(4, np.float32))
    raw = mx.compile(lambda a: [a * 2.0 + 1.0])
    rlx = rlx_jax.jit(lambda a: a * 2.0 + 1.0, backend="mlx", output="native")
    mx.eval(raw(x), rlx(x))
    exe = next(iter(rlx._cache.values()))
    for label, a, b in [
        ("call only", lambda: rlx(x), lambda: raw(x)),
        ("call + eval", lambda: mx.eval(rlx(x)), lambda: mx.eval(raw(x))),
        ("executable (no pytree/cache lookup)", lambda: exe.executable(x), lambda: raw(x)),
        ("executable + eval", lambda: mx.eval(exe.executable(x)), lambda: mx.eval(raw(x))),
    ]:
        ta, tb = side_by_side(a, b, n)
        print(f"  {label:38s} rlx {ta * 1e6:7.2f} us  raw {tb * 1e6:7.2f} us  "
              f"overhead {(ta - tb) * 1e6:+6.2f} us")


def chain(n_iter):
    def f(x, y):
        for i in range(n_iter):
            x = jnp.sin(x) * 1.01 + y
            y = y * 0.99 - jnp.tanh(x)
        return x.sum() + y.sum()
    return f


def compile_latency(sizes, jax_limit):
    """rlx_jax phases on a fresh kernel cache (g++ builds included) vs jax.jit's first call.
    jax.jit is timed up to `jax_limit` eqns only: XLA's CPU compile of a 10k-eqn elementwise
    chain is superlinear (> 5 min measured on the 2-core CI machine)."""
    print("(c) compile latency: trace+legalize+lower+first run vs jax.jit first call")
    x = np.ones((8, 8), np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        os.environ["RLX_JAX_CACHE_DIR"] = d
        for target in sizes:
            f = chain(target // 6)
            eqns = len(jax.make_jaxpr(f)(x, x).eqns)
            rj = rlx_jax.jit(f, backend="mlx")
            t0 = time.perf_counter()
            mx.eval(rj(x, x))
            t_rlx = time.perf_counter() - t0
            tm = next(iter(rj._cache.values())).lowered.timings
            parts = " ".join(f"{k} {v * 1e3:.0f}" for k, v in tm.items())
            first_run = t_rlx - sum(tm.values())
            line = (f"  {eqns:6d} eqns: rlx {t_rlx:6.2f} s ({parts} ms, first run incl. g++ "
                    f"{first_run * 1e3:.0f} ms)")
            t_jax = None
            if eqns <= jax_limit:
                t0 = time.perf_counter()
                jax.block_until_ready(jax.jit(f)(x, x))
                t_jax = time.perf_counter() - t0
                line += f"  jax.jit {t_jax:6.2f} s  ratio {t_rlx / t_jax:5.2f}x"
            else:
                line += "  jax.jit not timed (pass --jax-limit to include it)"
            rows.append((eqns, t_rlx, sum(tm.values()), t_jax))
            print(line)
    if len(rows) == 2:
        (e1, r1, p1, j1), (e2, r2, p2, j2) = rows
        print(f"  growth for {e2 / e1:.1f}x eqns: rlx total {r2 / r1:.1f}x, "
              f"trace+legalize+lower {p2 / p1:.1f}x"
              + (f", jax.jit {j2 / j1:.1f}x" if j1 and j2 else ""))


def _train_step(p, x, y):
    loss, g = mlp_jax(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss


def result_kinds(n, steps=10):
    print("(d) result kinds: MLP training loop, parameters fed back each step")
    from rlx_jax.backends.mlx.runtime import backing_array, to_jax
    _, _, _, pj, _, (x, y) = models()[0]
    loops = {}
    for output in ("native", "jax"):
        step = rlx_jax.jit(_train_step, backend="mlx", output=output)
        xm, ym = mx.array(x), mx.array(y)

        def loop(step=step, xm=xm, ym=ym):
            p = pj
            for _ in range(steps):
                p, loss = step(p, xm, ym)
            np.asarray(loss)
            return p
        p = loop()
        fed_back = all(backing_array(a) is not None for a in jax.tree.leaves(p)) \
            if output == "jax" else True
        loops[output] = (loop, fed_back)
    t_native, t_jax = side_by_side(loops["native"][0], loops["jax"][0], max(n // 4, 2))
    nbytes = sum(np.asarray(a).nbytes for a in jax.tree.leaves(pj))
    print(f"  {steps} steps, {nbytes / 1e6:.2f} MB of parameters: native {t_native * 1e3:8.2f} ms"
          f"  jax {t_jax * 1e3:8.2f} ms  ratio {t_jax / t_native:5.2f}x  (jax results fed back "
          f"without a copy: {loops['jax'][1]})")
    for size in (16, 4 << 10, 4 << 20):
        a = mx.ones((size // 4,), mx.float32)
        mx.eval(a)
        t = bench(lambda a=a: to_jax([a]), n * 10)
        print(f"  mx.array -> jax.Array, {size:>8d} B: {t * 1e6:8.2f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--jax-limit", type=int, default=2000,
                    help="time jax.jit's first call only for programs up to this many eqns")
    a = ap.parse_args()
    n = 5 if a.quick else 20
    print(f"mlx {mx.__version__} on {mx.default_device()}, jax {jax.__version__}")
    lowering_overhead(n)
    dispatch_overhead(200 if a.quick else 2000)
    compile_latency((1000, 10000), a.jax_limit)
    result_kinds(n)


if __name__ == "__main__":
    main()
