"""Weak scaling of the data-parallel MLP step over processes: the same per-process batch on 1, 2
and 4 processes (`mlx.launch --hosts 127.0.0.1 -n N --backend ring`, one launch per count, all
in one run of this script), gradients and loss averaged with lax.pmean over "batch".

Printed (never asserted): per process count, rank 0's median step time (forward, backward,
all-reduce of the gradients, update; parameters stay MLX arrays between steps) and its ratio to
the 1-process time; and, timed interleaved with it, the same step without the pmean (each rank
on its own), which shows what the processes sharing the machine's cores cost apart from the
all-reduce. Perfect weak scaling is 1.00 at every count.

Run (loopback, this machine):
    python benchmarks/bench_dp_scaling.py [--procs 1,2,4] [--batch 64] [--sizes 64,256,256,10]
    [--steps 30]
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_TIMEOUT_S = 600


def worker(args):
    """One process of a launch: times args.steps steps on its own batch of args.batch rows."""
    import mlx.core as mx
    import numpy as np

    import rlx_jax
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from data_parallel import init, make_step      # the example's MLP and its step
    step, local_step = make_step(0.1, "batch"), make_step(0.1, None)
    group = rlx_jax.distributed.initialize(backend="ring" if args.n > 1 else "any")
    rank = group.rank()
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(rank)
    params = init(np.random.default_rng(0), sizes)      # the same parameters on every rank
    x = rng.normal(size=(args.batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], args.batch)]
    batch = (mx.array(x), mx.array(y))
    dp = rlx_jax.jit(step, backend="mlx", axis_name="batch", output="native")
    local = rlx_jax.jit(local_step, backend="mlx", output="native")
    times, local_times, local_params = [], [], params
    for i in range(args.steps + 3):                     # 3 warm-up steps: build, connections
        t0 = time.perf_counter()
        params, loss = dp(params, batch)
        mx.eval(params, loss)
        t1 = time.perf_counter()
        local_params, _ = local(local_params, batch)    # interleaved: the same step, no pmean
        mx.eval(local_params)
        if i >= 3:
            times.append(t1 - t0)
            local_times.append(time.perf_counter() - t1)
    if rank == 0:
        print(f"RESULT {group.size()} {statistics.median(times):.9f} "
              f"{statistics.median(local_times):.9f}", flush=True)


def free_port(n):
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + n < 65535:
            return p
    raise RuntimeError("no free port on 127.0.0.1")


def launch(n, args):
    """Runs this script as a worker on n processes; returns rank 0's median step times (s):
    the data-parallel step and the same step without its pmean."""
    launcher = shutil.which("mlx.launch") or os.path.join(os.path.dirname(sys.executable),
                                                          "mlx.launch")
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--n", str(n), "--batch",
            str(args.batch), "--sizes", args.sizes, "--steps", str(args.steps)]
    cmd = argv if n == 1 else [launcher, "--hosts", "127.0.0.1", "-n", str(n), "--backend",
                               "ring", "--starting-port", str(free_port(n)), *argv]
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"},
                            cwd=ROOT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    lines = [ln.split() for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-4000:]}")
    return float(lines[-1][2]), float(lines[-1][3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", default="1,2,4")
    ap.add_argument("--batch", type=int, default=64, help="rows per process")
    ap.add_argument("--sizes", default="64,256,256,10", help="MLP layer widths")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    print(f"weak scaling, MLP {args.sizes}, {args.batch} rows per process, median of "
          f"{args.steps} steps; {os.cpu_count()} CPU cores")
    print(f"{'procs':>5} {'global batch':>12} {'step ms':>9} {'vs 1 proc':>9} "
          f"{'no-pmean ms':>11} {'vs 1 proc':>9}", flush=True)
    base = None
    for n in (int(s) for s in args.procs.split(",")):
        t, t_local = launch(n, args)
        base = base or (t, t_local)
        print(f"{n:5d} {n * args.batch:12d} {t * 1e3:9.2f} {t / base[0]:9.2f} "
              f"{t_local * 1e3:11.2f} {t_local / base[1]:9.2f}", flush=True)


if __name__ == "__main__":
    main()
