"""Worker processes: each runs one case at a time; a case that crashes its worker or runs past
the timeout fails alone (status "crash" / "timeout") and the worker is replaced. Workers are
also replaced every `recycle` cases, so one case's leftovers (caches, memory) stay bounded."""
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading


class WorkerProcess:
    def __init__(self, path, backend, options, env):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="rlx-conformance-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlx_jax.conformance.worker", path, backend,
             json.dumps(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, env=env, text=True, start_new_session=True)
        self.done = 0

    def ask(self, request, timeout):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            return {"status": "timeout", "exc": "Timeout",
                    "reason": f"no answer in {timeout:g} s (the worker was killed)"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            return {"status": "crash", "exc": "Crash",
                    "reason": f"the worker died (exit {code}): {self.tail()}"}
        self.done += 1
        return json.loads(line)

    def tail(self):
        self.log.flush()
        with open(self.log.name) as f:
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
        return " | ".join(lines[-2:])[:300]

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        os.unlink(self.log.name)


def run_requests(requests, *, path, backend, options, jobs, timeout, recycle, env=None,
                 progress=None):
    """Answers to `requests` (dicts for the worker), in order, from `jobs` workers."""
    env = dict(os.environ if env is None else env)
    todo = queue.Queue()
    for i, r in enumerate(requests):
        todo.put((i, r))
    answers = [None] * len(requests)

    def serve():
        worker = None
        while True:
            try:
                i, req = todo.get_nowait()
            except queue.Empty:
                break
            if worker is None or worker.proc.poll() is not None or worker.done >= recycle:
                if worker is not None:
                    worker.close()
                worker = WorkerProcess(path, backend, options, env)
            answers[i] = worker.ask(req, timeout)
            if answers[i].get("status") in ("timeout", "crash"):
                worker.close()
                worker = None
            if progress is not None:
                progress(req, answers[i])
        if worker is not None:
            worker.close()

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers
