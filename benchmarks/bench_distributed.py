"""All-reduce bandwidth: rlx_jax (lax.psum in a function jitted with axis_name, lowered to
mx.distributed.all_sum inside the compiled MLX program) against raw mx.distributed.all_sum, on
1, 16 and 256 MB float32 buffers, measured interleaved in one run.

Printed on rank 0 (never asserted): per size, the median time and bus-free "algorithm bandwidth"
(buffer bytes / time) of each, and rlx/raw time ratio.

Run (loopback, this machine):
    mlx.launch --hosts 127.0.0.1 -n 2 --backend ring python benchmarks/bench_distributed.py
    [--sizes-mb 1,16,256] [--repeats 10]
"""
import argparse
import statistics
import time

import mlx.core as mx
from jax import lax

import rlx_jax


def timed(fn, x):
    t0 = time.perf_counter()
    mx.eval(fn(x))
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="1,16,256")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    group = rlx_jax.distributed.initialize()
    rank, size = group.rank(), group.size()
    if size == 1 and rank == 0:
        print("a group of one process: launch with `mlx.launch -n 2 --backend ring python "
              "benchmarks/bench_distributed.py`")

    def raw(x):
        return mx.distributed.all_sum(x, group=group)
    rlx = rlx_jax.jit(lambda x: lax.psum(x, "batch"), backend="mlx", axis_name="batch",
                      output="native")
    if rank == 0:
        print(f"{size} processes; all-reduce (sum) of float32 buffers, median of "
              f"{args.repeats}")
        print(f"{'MB':>6} {'raw ms':>9} {'raw GB/s':>9} {'rlx ms':>9} {'rlx GB/s':>9} "
              f"{'rlx/raw':>8}")
    for mb in (int(s) for s in args.sizes_mb.split(",")):
        x = mx.ones((mb * 2 ** 20 // 4,), dtype=mx.float32) * (rank + 1)
        mx.eval(x)
        timed(raw, x), timed(rlx, x)                    # warm-up: connections, kernels
        t_raw, t_rlx = [], []
        for _ in range(args.repeats):                    # interleaved
            t_raw.append(timed(raw, x))
            t_rlx.append(timed(rlx, x))
        a, b = statistics.median(t_raw), statistics.median(t_rlx)
        nbytes = x.nbytes / 1e9
        if rank == 0:
            print(f"{mb:6d} {a * 1e3:9.2f} {nbytes / a:9.2f} {b * 1e3:9.2f} {nbytes / b:9.2f} "
                  f"{b / a:8.2f}", flush=True)


if __name__ == "__main__":
    main()
