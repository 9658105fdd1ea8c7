"""The fuzzing loop: generate a program per seed, compute JAX's results once, run it on every
requested backend in that backend's worker process, classify, shrink each failure, and collect a
summary with the distinct minimal reproducers."""
import collections
import dataclasses
import re
import time

import numpy as np

from .generate import Config, Reject, generate
from .oracle import Outcome, compare, reference, tolerance
from .shrink import shrink
from .worker import Worker


def backend_options(backend, seed, mlx_compile_fraction):
    """rlx_jax.jit options for one program: MLX runs `mx.compile`d (g++ kernels, ~0.4 s a new
    program on Linux) for a seeded fraction of the programs and eagerly otherwise."""
    if backend == "mlx" and np.random.default_rng([seed, 7]).random() >= mlx_compile_fraction:
        return {"compile": False}
    return {}


def check(prog, backend, worker, options, config):
    """The outcome of `prog` on `backend`, or None when its values are ill-conditioned."""
    try:
        want, scale, avals = reference(prog, config)
    except Reject:
        return None
    status, payload = worker.run(prog, options)
    if status != "ok":
        return Outcome("refused" if status == "refused" else "crash", payload)
    got, host = payload
    diff = compare(got, want, tolerance(prog, avals), scale)
    return Outcome("mismatch", diff, tuple(host)) if diff else Outcome("match", "", tuple(host))


@dataclasses.dataclass
class Finding:
    backend: str
    seed: int
    outcome: Outcome
    program: object             # the shrunk Program
    options: dict
    original_ops: int
    count: int = 1              # programs that shrank to the same reproducer

    def key(self):
        detail = re.sub(r"[-\d.e]+", "#", self.outcome.detail.splitlines()[0])[:120]
        ops = tuple(sorted({o.op for o in self.program.ops}))
        return (self.backend, self.outcome.kind, detail if self.outcome.kind != "mismatch" else "",
                ops, bool(self.program.grad))

    def text(self):
        head = (f"--- {self.outcome.kind} on {self.backend}: seed {self.seed} "
                f"({self.original_ops} ops, shrunk to {len(self.program.ops)}; "
                f"{self.count} program(s) like it)\n")
        return head + "# " + self.outcome.detail.replace("\n", "\n# ") + "\n" + \
            self.program.reproducer(self.backend, self.options)


@dataclasses.dataclass
class Summary:
    backends: list
    counts: dict = dataclasses.field(default_factory=dict)       # backend -> Counter(kind)
    families: dict = dataclasses.field(default_factory=dict)     # backend -> family -> Counter
    seconds: dict = dataclasses.field(default_factory=dict)      # backend -> backend-call time
    refusals: dict = dataclasses.field(default_factory=dict)     # backend -> Counter(error line)
    host: dict = dataclasses.field(default_factory=dict)         # backend -> Counter(kind: why)
    host_programs: dict = dataclasses.field(default_factory=dict)  # backend -> programs
    claimed_on_host: dict = dataclasses.field(default_factory=dict)  # backend -> [(seed, op)]
    findings: list = dataclasses.field(default_factory=list)
    programs: int = 0
    skipped: int = 0
    generate_seconds: float = 0.0
    wall: float = 0.0

    def add(self, finding):
        for f in self.findings:
            if f.key() == finding.key():
                f.count += 1
                if len(finding.program.ops) < len(f.program.ops):
                    f.program, f.seed, f.outcome = finding.program, finding.seed, finding.outcome
                return
        self.findings.append(finding)

    def text(self):
        lines = [f"{self.programs} programs, {self.wall:.1f} s "
                 f"(generation + JAX reference {self.generate_seconds:.1f} s); "
                 f"{self.skipped} ill-conditioned skipped"]
        for b in self.backends:
            c, s = self.counts[b], self.seconds[b]
            rate = self.programs / max(s + self.generate_seconds, 1e-9)
            lines.append(f"{b}: " + ", ".join(f"{k} {c[k]}" for k in
                                              ("match", "refused", "mismatch", "crash")) +
                         f"; backend calls {s:.1f} s; {rate:.2f} programs/s end to end")
            for fam, fc in sorted(self.families[b].items()):
                lines.append(f"  {fam:15s} " + " ".join(f"{k}={fc[k]}" for k in
                                                         ("match", "refused", "mismatch", "crash")
                                                         if fc[k]))
            for msg, n in self.refusals[b].most_common(8):
                lines.append(f"  refused x{n}: {msg[:150]}")
            lines.append(f"  {self.host_programs[b]} program(s) with host ops; "
                         f"{len(self.claimed_on_host[b])} with a claimed kind on the host")
            for msg, n in self.host[b].most_common(8):
                lines.append(f"  host x{n}: {msg[:150]}")
        lines.append(f"{len(self.findings)} distinct minimal reproducers")
        return "\n".join(lines) + "\n\n" + "\n".join(f.text() for f in self.findings)

    def as_dict(self):
        return {"programs": self.programs, "counts": {b: dict(c) for b, c in self.counts.items()},
                "seconds": self.seconds, "generate_seconds": self.generate_seconds,
                "host_programs": self.host_programs,
                "host": {b: dict(c) for b, c in self.host.items()},
                "claimed_on_host": self.claimed_on_host,
                "findings": [{"backend": f.backend, "seed": f.seed, "kind": f.outcome.kind,
                              "detail": f.outcome.detail, "count": f.count,
                              "reproducer": f.program.reproducer(f.backend, f.options)}
                             for f in self.findings]}


def fuzz(backends, seeds, config=None, mlx_compile_fraction=0.1, shrink_budget=150,
         timeout=120.0, log=None):
    """Runs `seeds` on every backend; returns a Summary."""
    config = config or Config()
    s = Summary(list(backends))
    workers = {b: Worker(b, timeout=timeout) for b in backends}
    for b in backends:
        s.counts[b], s.seconds[b] = collections.Counter(), 0.0
        s.families[b], s.refusals[b] = collections.defaultdict(collections.Counter), \
            collections.Counter()
        s.host[b], s.host_programs[b], s.claimed_on_host[b] = collections.Counter(), 0, []
    start = time.perf_counter()
    try:
        for seed in seeds:
            t = time.perf_counter()
            prog = generate(seed, config)
            s.generate_seconds += time.perf_counter() - t
            s.programs += 1
            for b in backends:
                opts = backend_options(b, seed, mlx_compile_fraction)
                t = time.perf_counter()
                out = check(prog, b, workers[b], opts, config)
                s.seconds[b] += time.perf_counter() - t
                if out is None:
                    s.skipped += 1
                    continue
                s.counts[b][out.kind] += 1
                for fam in prog.families() + (["grad"] if prog.grad else []):
                    s.families[b][fam][out.kind] += 1
                if out.kind == "refused":
                    s.refusals[b][re.sub(r"\d+", "#", out.detail)] += 1
                if out.host:
                    s.host_programs[b] += 1
                for kind, why, claimed in out.host:
                    s.host[b][re.sub(r"\d+", "#", f"{kind}: {why}")] += 1
                    if claimed:
                        s.claimed_on_host[b].append((seed, f"{kind}: {why}"))
                if out.kind in ("mismatch", "crash"):
                    small = _shrink(prog, b, workers[b], opts, config, out, shrink_budget)
                    s.add(Finding(b, seed, out, small, opts, len(prog.ops)))
                    if log:
                        log(f"seed {seed} {b}: {out.kind}: {out.detail.splitlines()[0][:200]}")
    finally:
        for w in workers.values():
            w.close()
    s.wall = time.perf_counter() - start
    return s


def _shrink(prog, backend, worker, options, config, outcome, budget):
    if outcome.detail.startswith("Signal") or outcome.detail.startswith("Timeout"):
        budget = min(budget, 40)     # each candidate that still dies restarts the worker

    def still_fails(cand):
        o = check(cand, backend, worker, options, config)
        return o is not None and o.signature() == outcome.signature()
    small, _ = shrink(prog, still_fails, budget)
    return small
