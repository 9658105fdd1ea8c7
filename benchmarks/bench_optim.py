"""optax's update steps + apply_updates over a model's leaves: Adam over 16-bit leaves and with
`mu_dtype`, Lion, SGD with momentum (plain and nesterov), as the AdamUpdate, LionUpdate and
SgdMomentumUpdate kinds (passes/recognize_optim.py, recognize_sgd.py) against
`recognize=False`, side by side in one run on MLX (the rows of bench_xent.py: update nodes, IR
ops, MLX primitives, median call time interleaved, ratio recognised / off), and the Core ML
MIL op counts of both (bfloat16 computed in float32 there: Core ML has no bfloat16 tensors).

Run: python benchmarks/bench_optim.py [--quick] [--width 512] [--layers 8]
"""
import argparse
import os
import tempfile

import jax.numpy as jnp
import numpy as np
import optax

import rlx_jax
from bench_xent import mlx_row        # (this folder: the script's own, first on sys.path)

BF16 = jnp.bfloat16
OPTIMIZERS = {   # name: (optimizer, parameter dtype)
    "adam bf16": (optax.adam(1e-3), BF16),
    "adam mu bf16": (optax.adam(1e-3, mu_dtype=BF16), np.float32),
    "lion f32": (optax.lion(1e-4), np.float32),
    "lion bf16": (optax.lion(1e-4), BF16),
    "sgd momentum": (optax.sgd(0.1, momentum=0.9), np.float32),
    "sgd nesterov": (optax.sgd(0.1, momentum=0.9, nesterov=True), np.float32),
}
KINDS = ("AdamUpdate", "LionUpdate", "SgdMomentumUpdate")


def programs(width, layers, seed=0):
    """{name: (update step, arguments)}: a [width, width] weight and a [width] bias a layer."""
    r = np.random.RandomState(seed)
    shapes = {f"{k}{i}": (width, width) if k == "w" else (width,)
              for i in range(layers) for k in "wb"}
    out = {}
    for name, (opt, dtype) in OPTIMIZERS.items():
        params = {k: jnp.asarray(r.randn(*s), dtype) for k, s in shapes.items()}
        grads = {k: jnp.asarray(0.1 * r.randn(*s), dtype) for k, s in shapes.items()}

        def step(p, s, g, opt=opt):
            u, s = opt.update(g, s, p)
            return optax.apply_updates(p, u), s
        out[name] = (step, (params, opt.init(params), grads))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer repetitions")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    opts = ap.parse_args()
    os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx-bench-"))
    if opts.quick:
        opts.width, opts.layers = 64, 4
    runs, rounds = (5, 2) if opts.quick else (20, 3)
    available = rlx_jax.available_backends()
    print(f"\noptax update step: {opts.layers} layers of width {opts.width} "
          "(recognised / recognize=False)")
    for name, (fn, args) in programs(opts.width, opts.layers).items():
        if "mlx" in available:
            mlx_row(name, fn, args, runs, rounds, kinds=KINDS)
        if "coreml" in available:
            ops = [sum(rlx_jax.jit(fn, backend="coreml", recognize=rec, optimize="fast",
                                   bfloat16="float32")
                       .lower(*args).op_counts(level="backend").values()) for rec in (True, False)]
            print(f"  {'Core ML MIL':<15} {name}: recognised {ops[0]} ops, off {ops[1]} ops")


if __name__ == "__main__":
    main()
