"""Command line of the fuzzer (see __main__.py): prints the summary (outcomes per backend and per
op family, programs/s) and every distinct minimal reproducer; exits 1 when anything mismatched
or crashed."""
import argparse
import json
import sys

from .generate import Config
from .runner import fuzz


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--backend", default="xla", help="comma-separated: mlx,coreml,xla")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="first seed; seeds are seed..seed+count-1")
    p.add_argument("--grad-fraction", type=float, default=0.3)
    p.add_argument("--max-ops", type=int, default=25)
    p.add_argument("--mlx-compile-fraction", type=float, default=0.1,
                   help="share of programs run mx.compile'd on MLX (the rest eagerly)")
    p.add_argument("--exclude", default="", help="comma-separated op names never to draw")
    p.add_argument("--no-conv-zero-size", action="store_true",
                   help="keep convolution operands free of size-0 dimensions")
    p.add_argument("--zero-dim-prob", type=float, default=Config.zero_dim_prob,
                   help="chance that a drawn dimension is 0")
    p.add_argument("--shrink-budget", type=int, default=150)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per backend call")
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--json", help="write a machine-readable summary to this file")
    p.add_argument("--quiet", action="store_true", help="no per-failure progress lines")
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    config = Config(max_ops=a.max_ops, grad_fraction=a.grad_fraction,
                    exclude=tuple(x for x in a.exclude.split(",") if x),
                    conv_zero_size=not a.no_conv_zero_size, zero_dim_prob=a.zero_dim_prob)
    log = None if a.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    s = fuzz(a.backend.split(","), range(a.seed, a.seed + a.count), config,
             mlx_compile_fraction=a.mlx_compile_fraction, shrink_budget=a.shrink_budget,
             timeout=a.timeout, log=log)
    report = s.text()
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s.as_dict(), f, indent=1)
    bad = sum(c["mismatch"] + c["crash"] for c in s.counts.values())
    return 1 if bad else 0
