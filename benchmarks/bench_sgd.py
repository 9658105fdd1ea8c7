"""optax.sgd with momentum (plain and nesterov) + apply_updates over a model's leaves: the
SgdMomentumUpdate kind (passes/recognize_sgd.py) against `recognize=False`, side by side in one
run on MLX (the rows of bench_xent.py: SgdMomentumUpdate nodes, IR ops, MLX primitives, median
call time interleaved, ratio recognised / off), and the Core ML MIL op counts of both.

Run: python benchmarks/bench_sgd.py [--quick] [--width 512] [--layers 8]
"""
import argparse
import os
import tempfile

import numpy as np
import optax

import rlx_jax
from bench_xent import mlx_row        # (this folder: the script's own, first on sys.path)


def programs(width, layers, seed=0):
    """{name: (update step, arguments)}: a [width, width] weight and a [width] bias a layer."""
    r = np.random.RandomState(seed)
    params = {f"{k}{i}": r.randn(*((width, width) if k == "w" else (width,))).astype(np.float32)
              for i in range(layers) for k in "wb"}
    grads = {k: (0.1 * r.randn(*v.shape)).astype(np.float32) for k, v in params.items()}
    out = {}
    for name, opt in (("momentum", optax.sgd(0.1, momentum=0.9)),
                      ("nesterov", optax.sgd(0.1, momentum=0.9, nesterov=True))):
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
    print(f"\noptax.sgd momentum step: {opts.layers} layers of width {opts.width} "
          "(recognised / recognize=False)")
    for name, (fn, args) in programs(opts.width, opts.layers).items():
        if "mlx" in available:
            mlx_row(name, fn, args, runs, rounds, kinds=("SgdMomentumUpdate",))
        if "coreml" in available:
            ops = [sum(rlx_jax.jit(fn, backend="coreml", recognize=rec, optimize="fast")
                       .lower(*args).op_counts(level="backend").values()) for rec in (True, False)]
            print(f"  {'Core ML MIL':<15} {name}: recognised {ops[0]} ops, off {ops[1]} ops")


if __name__ == "__main__":
    main()
