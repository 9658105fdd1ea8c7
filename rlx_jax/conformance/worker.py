"""A conformance worker: `python -m rlx_jax.conformance.worker DIR BACKEND [OPTIONS_JSON]`.

Reads one JSON request a line on stdin ({"list": file} or {"file": f, "case": "Class.method"})
and answers one JSON line each on the stdout it started with; what the tests print goes to
stderr. BACKEND "jax" runs the tests as they are (plain jax.jit), for the rerun of failures.
"""
import json
import os
import sys
import time
import traceback
import unittest
import weakref

_REPLY = os.fdopen(os.dup(1), "w")          # answers; the tests' own prints go to stderr
os.dup2(2, 1)
sys.stdout = sys.stderr


def _first_lines(exc, n):
    """The first n non-empty lines of the message (one more where a line ends in ':')."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if lines[n - 1:n] and lines[n - 1].endswith(":"):
        n += 1
    return " | ".join(lines[:n])


def _where(tb):
    """The innermost frame of the traceback inside rlx_jax (file:line), or None."""
    hit = None
    for frame in traceback.extract_tb(tb):
        if os.sep + "rlx_jax" + os.sep in frame.filename and \
                os.sep + "conformance" + os.sep not in frame.filename:
            hit = f"rlx_jax{frame.filename.split(os.sep + 'rlx_jax', 1)[1]}:{frame.lineno}"
    return hit


class _Result(unittest.TestResult):
    """Keeps the exception objects, not only their formatted text."""

    def __init__(self):
        super().__init__()
        self.problems = []

    def _keep(self, kind, err):
        _, exc, tb = err
        self.problems.append({"kind": kind, "exc": type(exc).__name__,
                              "reason": _first_lines(exc, 1), "detail": _first_lines(exc, 4),
                              "where": _where(tb)})

    def addError(self, test, err):
        self._keep("error", err)
        super().addError(test, err)

    def addFailure(self, test, err):
        self._keep("fail", err)
        super().addFailure(test, err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._keep("fail" if issubclass(err[0], test.failureException) else "error", err)
        super().addSubTest(test, subtest, err)


class _Programs(list):
    """The programs a case builds, held weakly: a test that frees its functions and counts
    JAX's live arrays (test_cond_memory_leak) must not find them kept alive by the runner.
    Each entry is (weak reference, whether it ran whole on the device), the placement read
    when it is built; its runtime is read after the case while it is still alive."""

    def append(self, compiled):
        try:
            device_only = compiled.lowered.placement().device_only
        except Exception as e:               # a program that failed to build is in the errors
            device_only = repr(e)[:200]
        super().append((weakref.ref(compiled), device_only))


class Worker:
    def __init__(self, path, backend, options):
        self.path, self.backend, self.modules = path, backend, {}
        from . import cases
        self.cases = cases
        self.shim = self.eager = None
        options = dict(options)
        eager = options.pop("eager", False)
        if backend != "jax":
            from .shim import Shim
            self.shim = Shim(backend, (), options).install()
            if eager:
                from .eager import Eager
                self.eager = Eager(backend, options).install()

    def module(self, name):
        if name not in self.modules:
            if self.shim is not None:
                self.shim.callers.add(name)
            self.modules[name] = self.cases.import_test_module(self.path, name)
        return self.modules[name]

    def list(self, name):
        return {"cases": self.cases.case_ids(self.module(name))}

    def run(self, name, case):
        module = self.module(name)
        cls, method = case.split(".", 1)     # method names may hold dots: no loadTestsFromName
        test = getattr(module, cls)(method)
        result = _Result()
        if self.shim is not None:
            self.shim.jitted = self.shim.read_ir = self.shim.calls = 0
            self.shim.mlir_lowerings = 0
        if self.eager is not None:
            self.eager.calls = 0
        t0 = time.perf_counter()
        programs = _Programs()
        from .. import stages
        stages.RECORDERS.append(programs)
        try:
            test.run(result)
        finally:
            stages.RECORDERS.remove(programs)
        out = {"seconds": round(time.perf_counter() - t0, 3),
               "jitted": self.shim.jitted if self.shim else None,
               "read_ir": self.shim.read_ir if self.shim else None,
               "calls": self.shim.calls if self.shim else None,
               "mlir_lowerings": self.shim.mlir_lowerings if self.shim else None,
               "eager_calls": self.eager.calls if self.eager else None,
               "programs": len(programs), "host_programs": 0, "eager_programs": 0}
        for ref, device_only in programs:
            if isinstance(device_only, str):
                out.setdefault("unreadable", device_only)
                continue
            out["host_programs"] += not device_only
            p = ref()
            out["eager_programs"] += p is not None and p.runtime.startswith("mlx-eager")
        if result.problems:
            first = result.problems[0]
            out.update(status="error" if any(p["kind"] == "error" for p in result.problems)
                       else "fail", **{k: first[k] for k in ("exc", "reason", "detail", "where")})
        elif result.unexpectedSuccesses:
            out.update(status="fail", exc="UnexpectedSuccess", reason="unexpected success")
        elif result.skipped:
            out.update(status="skip", reason=str(result.skipped[0][1]).splitlines()[0][:300])
        else:
            out.update(status="pass")
        return out


def main(argv):
    path, backend = argv[0], argv[1]
    options = json.loads(argv[2]) if len(argv) > 2 else {}
    worker = Worker(path, backend, options)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "list" in req:
                reply = worker.list(req["list"])
            else:
                reply = worker.run(req["file"], req["case"])
        except BaseException as e:        # an import or loader failure: reported, worker lives
            traceback.print_exc()         # into the worker's log
            reply = {"status": "error", "exc": type(e).__name__,
                     "reason": f"{type(e).__name__}: {_first_lines(e, 1)}"[:300],
                     "where": _where(e.__traceback__), "harness": True}
        _REPLY.write(json.dumps(reply) + "\n")
        _REPLY.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
