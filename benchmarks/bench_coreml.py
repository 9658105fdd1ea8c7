"""Core ML compile latency, split by stage, and MIL program sizes.

For an MLP, a CNN and a 4-block transformer written with plain jax.numpy: trace (make_jaxpr +
frontend), legalize, MIL build, ct.convert with the default and the empty ("fast") pass
pipeline, and save; MIL op counts after each pipeline; jax.jit's first call for scale.

    python benchmarks/bench_coreml.py
"""
import os
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import rlx_jax  # noqa: E402
from rlx_jax.backends.coreml import backend as cm  # noqa: E402
from rlx_jax.backends.coreml import package  # noqa: E402

R = np.random.RandomState(0)


def w(*shape, scale=0.1):
    return (R.randn(*shape) * scale).astype(np.float32)


def mlp():
    params = [(w(256, 512), w(512)), (w(512, 512), w(512)), (w(512, 10), w(10))]

    def f(params, x):
        for i, (a, b) in enumerate(params):
            x = x @ a + b
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return jax.nn.log_softmax(x)
    return f, (params, w(32, 256, scale=1))


def cnn():
    params = {"c1": w(3, 3, 3, 16), "c2": w(3, 3, 16, 32), "d": w(8 * 8 * 32, 10)}

    def f(p, x):
        dn = ("NHWC", "HWIO", "NHWC")
        x = jax.nn.relu(lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME",
                                                 dimension_numbers=dn))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = jax.nn.relu(lax.conv_general_dilated(x, p["c2"], (1, 1), "SAME",
                                                 dimension_numbers=dn))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return x.reshape(x.shape[0], -1) @ p["d"]
    return f, (params, w(8, 32, 32, 3, scale=1))


def transformer(blocks=4, d=128, heads=4, seq=64):
    def block_params():
        return {"qkv": w(d, 3 * d), "o": w(d, d), "f1": w(d, 4 * d), "f2": w(4 * d, d),
                "g1": np.ones(d, np.float32), "g2": np.ones(d, np.float32)}
    params = [block_params() for _ in range(blocks)]

    def norm(x, g):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g

    def f(params, x):
        b, s, _ = x.shape
        mask = jnp.tril(jnp.ones((s, s), bool))
        for p in params:
            h = norm(x, p["g1"])
            q, k, v = jnp.split(h @ p["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)
                       for t in (q, k, v))
            a = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -1e9)
            a = jax.nn.softmax(a, axis=-1) @ v
            x = x + a.transpose(0, 2, 1, 3).reshape(b, s, d) @ p["o"]
            x = x + jax.nn.gelu(norm(x, p["g2"]) @ p["f1"]) @ p["f2"]
        return x
    return f, (params, w(2, seq, d, scale=1))


def measure(name, fn, args):
    t0 = time.perf_counter()
    jax.block_until_ready(jax.jit(fn)(*args))
    jax_first = time.perf_counter() - t0
    lowered = rlx_jax.jit(fn, backend="coreml").lower(*args)
    t = lowered.timings
    row = {"workload": name, "ir_nodes": sum(lowered.legalized.op_counts().values()),
           "trace": t["make_jaxpr"] + t["frontend"], "legalize": t["legalize"],
           "jax_first_call": jax_first}
    with tempfile.TemporaryDirectory() as tmp:
        for opt in ("default", "fast"):
            opts = package.Options(optimize=opt)
            timings = {}
            prog = cm.build(lowered.legalized, opts, timings)
            row["mil_build"] = timings["mil_build"]
            row["mil_ops_built"] = sum(prog.op_counts().values())
            model = package.convert(prog, opts, timings)
            row[f"convert_{opt}"] = timings["ct_convert"]
            t0 = time.perf_counter()
            package.save(model, os.path.join(tmp, f"{name}-{opt}.mlpackage"))
            row[f"save_{opt}"] = time.perf_counter() - t0
            spec_ops = model.get_spec().mlProgram.functions["main"]
            block = spec_ops.block_specializations[next(iter(spec_ops.block_specializations))]
            row[f"mil_ops_{opt}"] = sum(1 for op in block.operations if op.type != "const")
    return row


def main():
    measure("warmup", *mlp())          # first ct.convert / jax.jit pay one-off import costs
    rows = [measure(n, *make()) for n, make in (("mlp", mlp), ("cnn", cnn),
                                               ("transformer4", transformer))]
    cols = ["workload", "ir_nodes", "mil_ops_built", "mil_ops_default", "mil_ops_fast",
            "trace", "legalize", "mil_build", "convert_default", "convert_fast", "save_default",
            "save_fast", "jax_first_call"]
    print(" | ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]:>15}" if isinstance(r[c], (str, int)) else f"{r[c]*1e3:>13.1f}ms"
                         for c in cols))
    for r in rows:
        total_d = r["trace"] + r["legalize"] + r["mil_build"] + r["convert_default"] + \
            r["save_default"]
        total_f = r["trace"] + r["legalize"] + r["mil_build"] + r["convert_fast"] + \
            r["save_fast"]
        print(f"{r['workload']}: compile default {total_d * 1e3:.0f} ms, fast "
              f"{total_f * 1e3:.0f} ms ({total_d / total_f:.1f}x); vs jax.jit first call "
              f"{total_d / r['jax_first_call']:.1f}x / {total_f / r['jax_first_call']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
