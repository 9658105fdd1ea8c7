"""python -m rlx_jax.conformance --backend {xla,mlx,coreml} --jax-tests DIR [--sample N]

Runs JAX's test files (from DIR: a folder of them, or a JAX checkout) with the tests' jax.jit
replaced by rlx_jax.jit(backend=...); prints per-file pass rates, failure categories and
JAX's skips. The installed jax must be the tests' release."""
import argparse
import json
import os
import random
import sys
import threading
import time

from . import cases, pool, report


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m rlx_jax.conformance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True, choices=("xla", "mlx", "coreml"))
    p.add_argument("--jax-tests", required=True, metavar="DIR",
                   help="JAX's test files: their folder, or a JAX checkout")
    p.add_argument("--files", help="comma-separated test files (default: every known one)")
    p.add_argument("--sample", type=int, metavar="N", help="N seeded cases per file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-k", dest="pattern", help="only case ids containing this text")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    p.add_argument("--recycle", type=int, default=100, help="cases per worker process")
    p.add_argument("--num-generated-cases", type=int,
                   help="JAX_NUM_GENERATED_CASES (JAX's default: 10)")
    p.add_argument("--fallback", choices=("host", "error"), default="host")
    p.add_argument("--eager", action="store_true",
                   help="also run JAX's executions outside jit (op-by-op calls, library "
                        "functions called eagerly) through rlx_jax, as a device plugin would")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not rerun failures under plain jax.jit")
    p.add_argument("--out", metavar="FILE",
                   help="write every case's result as JSON lines, each as its case ends")
    p.add_argument("--resume", action="store_true",
                   help="with --out: keep the results FILE has (a run cut off goes on where it "
                        "stopped; the report covers them all)")
    p.add_argument("--retry-failures", action="store_true",
                   help="with --resume: run the kept cases that failed again (after a fix)")
    p.add_argument("--markdown", metavar="FILE", help="also write the report there")
    p.add_argument("--require", type=float, metavar="PERCENT",
                   help="exit 1 when a file's rate is below PERCENT")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="run although the installed jax is not the tests' release")
    return p.parse_args(argv)


RECORD = ("backend", "eager", "fallback")     # the options a results file is recorded under


def previous_results(args):
    """{(file, case): result} of an --out file being resumed (a later line of a case replaces
    an earlier one); refuses a file recorded under other options."""
    if not args.resume or not args.out or not os.path.exists(args.out):
        return {}
    found = {}
    with open(args.out) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:      # a line cut short when a run was stopped
                print(f"{args.out}:{n}: an unreadable line is run again", file=sys.stderr)
                continue
            for k in RECORD:
                if r.get(k) != getattr(args, k):
                    sys.exit(f"{args.out}:{n} was recorded with {k}={r.get(k)!r}, this run "
                             f"has {k}={getattr(args, k)!r}: name another --out file")
            found[(r["file"], r["case"])] = r
    if args.retry_failures:
        found = {k: r for k, r in found.items() if r["status"] not in report.BAD}
    return found


TEXT_LIMIT = 400      # characters of an error's reason and detail kept in a results file


def compact_line(result):
    """One results-file line: no empty fields, error texts cut at TEXT_LIMIT (a whole run's
    file stays a few MB: the repository keeps one per backend, docs/conformance/)."""
    r = {k: v for k, v in result.items() if v is not None}
    for k in ("reason", "detail"):
        if isinstance(r.get(k), str) and len(r[k]) > TEXT_LIMIT:
            r[k] = r[k][:TEXT_LIMIT] + "…"
    return json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n"


class Recorder:
    """Appends each result to the --out file as it ends (one JSON line, flushed)."""

    def __init__(self, args):
        self.f = open(args.out, "a" if args.resume else "w") if args.out else None
        if self.f is not None and self.f.tell():
            with open(args.out, "rb") as f:        # a line a stopped run left unfinished
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self.f.write("\n")
        self.fields = {k: getattr(args, k) for k in RECORD}
        self.lock = threading.Lock()

    def __call__(self, result):
        if self.f is not None:
            with self.lock:
                self.f.write(compact_line(dict(result, **self.fields)))
                self.f.flush()

    def close(self):
        if self.f is not None:
            self.f.close()


def main(argv=None):
    args = parse(argv)
    if args.resume and not args.out:
        sys.exit("--resume needs --out FILE (the results to go on from)")
    if args.retry_failures and not args.resume:
        sys.exit("--retry-failures needs --resume (it runs a results file's failures again)")
    path = cases.test_dir(args.jax_tests)
    cases.check_release(path, args.allow_mismatch)
    files = cases.files_in(path, args.files.split(",") if args.files else None)
    env = dict(os.environ)
    if args.num_generated_cases:
        env["JAX_NUM_GENERATED_CASES"] = str(args.num_generated_cases)
    common = dict(path=path, jobs=args.jobs, timeout=args.timeout, recycle=args.recycle,
                  env=env)
    t0 = time.time()
    listed = pool.run_requests([{"list": f} for f in files], backend="jax", options={},
                               **common)
    todo, counts = [], {}
    for f, got in zip(files, listed):
        if "cases" not in got:
            print(f"{f}: could not be loaded: {got.get('reason')}", file=sys.stderr)
            continue
        ids = [c for c in got["cases"] if not args.pattern or args.pattern in c]
        counts[f] = len(ids)
        if args.sample is not None and args.sample < len(ids):
            ids = sorted(random.Random(f"{args.seed}:{f}").sample(ids, args.sample))
        todo += [{"file": f, "case": c} for c in ids]
    previous = previous_results(args)
    every = todo
    todo = [r for r in todo if (r["file"], r["case"]) not in previous]
    print(f"{len(todo)} cases from {len(counts)} files on {args.backend} "
          f"({args.jobs} workers)" + (f"; {len(every) - len(todo)} kept from {args.out}"
                                      if previous else ""), file=sys.stderr, flush=True)
    done = [0]
    record = Recorder(args)

    def progress(req, ans):
        record(dict(req, **ans))
        done[0] += 1
        if ans["status"] in report.BAD or done[0] % 100 == 0:
            print(f"[{done[0]}/{len(todo)}] {req['file']}.{req['case']}: {ans['status']}"
                  + (f" {ans.get('reason', '')[:160]}" if ans["status"] in report.BAD else ""),
                  file=sys.stderr, flush=True)

    options = {"fallback": args.fallback, "eager": args.eager}
    answers = pool.run_requests(todo, backend=args.backend, options=options,
                                progress=progress, **common)
    new = {(req["file"], req["case"]): dict(req, **ans) for req, ans in zip(todo, answers)}
    results = [previous.get((r["file"], r["case"])) or new[(r["file"], r["case"])]
               for r in every]
    failed = [r for r in results if r["status"] in report.BAD and "jax_status" not in r]
    if failed and not args.no_rerun:
        print(f"rerunning {len(failed)} failed case(s) under plain jax.jit", file=sys.stderr)
        again = pool.run_requests([{"file": r["file"], "case": r["case"]} for r in failed],
                                  backend="jax", options={}, **common)
        for r, a in zip(failed, again):
            r["jax_status"] = a["status"]
            record(r)
    record.close()
    title = (f"JAX tests through rlx_jax (backend={args.backend!r}; --eager: JAX's executions "
             f"outside jit too)") if args.eager else None
    text = report.markdown(results, args.backend, counts, title)
    text += f"\n{len(results)} cases in {time.time() - t0:.0f} s, seed {args.seed}.\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.require is not None:
        low = [(n, report.rate(row)) for n, row in report.per_file(results).items()
               if report.rate(row) is not None and 100 * report.rate(row) < args.require]
        if low:
            print("below --require %g%%: " % args.require +
                  ", ".join(f"{n} {100 * r:.2f}%" for n, r in low), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
