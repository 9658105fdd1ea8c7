"""Backend calls in a child process, so a hard crash (a SIGFPE in a kernel, a segfault, a hang)
costs one program, not the run.

`Worker(backend)` starts `python -m tests.fuzz.worker`; `run(prog, options)` sends the program
(JSON) and returns ("ok", ([arrays], [(host-placed kind, reason, claimed?)])) | ("refused", text) | ("crash", text). A child that dies or
runs past `timeout` seconds is reported as a crash naming the signal (or the timeout) and is
replaced by a fresh one for the next program. Messages are length-prefixed pickles on the child's
stdin and on a private duplicate of its stdout; the child's own fd 1 goes to stderr, so library
prints cannot corrupt the channel.
"""
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _send(f, obj):
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        raise EOFError
    return pickle.loads(f.read(struct.unpack("<Q", head)[0]))


class Worker:
    def __init__(self, backend, timeout=120.0, quiet=True):
        self.backend, self.timeout, self.quiet, self.proc = backend, timeout, quiet, None
        self.restarts = 0

    def _start(self):
        env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if self.quiet else None)

    def run(self, prog, options=None):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            _send(self.proc.stdin, (prog.to_json(), self.backend, options or {}))
            ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            if not ready:
                self.proc.kill()
                self.proc.wait()
                self.proc, self.restarts = None, self.restarts + 1
                return "crash", f"Timeout: no result after {self.timeout:g} s"
            return _recv(self.proc.stdout)
        except (EOFError, BrokenPipeError, OSError):
            code = self.proc.wait()
            self.proc, self.restarts = None, self.restarts + 1
            if code < 0:
                return "crash", f"Signal: worker killed by {signal.Signals(-code).name}"
            return "crash", f"Exit: worker exited with status {code}"

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


def call_backend(prog, backend, options):
    """One program through rlx_jax.jit on `backend`, classified (runs in the child)."""
    import jax
    import numpy as np

    import rlx_jax
    from rlx_jax import errors
    from .program import Program
    from rlx_jax.backends.base import kept_kinds
    prog = Program.from_json(prog) if isinstance(prog, str) else prog
    fn, _, args = prog.build()
    try:
        with rlx_jax.testing.recorded_programs() as compiled:
            out = rlx_jax.jit(fn, backend=backend, **options)(*args)
        leaves = jax.tree.leaves(out, is_leaf=lambda x: type(x).__module__.startswith("mlx"))
        host = []                   # (kind, reason, whether the backend claims the kind)
        for c in compiled:
            kept = kept_kinds(c.lowered.backend)
            host += [(n.kind.name, why.splitlines()[0][:200], n.kind in kept)
                     for n, why in c.lowered.placement().host_ops()]
        return "ok", ([_np(x) for x in leaves], host)
    except errors.RlxError as e:
        return "refused", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    except Exception as e:          # noqa: BLE001 (every other exception is a crash finding)
        tb = traceback.format_exception(e)
        return "crash", f"{type(e).__name__}: {str(e)[:2000]}\n" + "".join(tb[-3:])[-2000:]


def _np(x):
    import numpy as np
    if type(x).__module__.startswith("mlx"):
        from rlx_jax.backends.mlx.runtime import to_numpy
        return to_numpy(x)
    return np.asarray(x)


def main():
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                   # stray prints go to stderr, not into the channel
    sys.stdout = sys.stderr
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    stdin = sys.stdin.buffer
    while True:
        try:
            prog, backend, options = _recv(stdin)
        except EOFError:
            return
        _send(channel, call_backend(prog, backend, options))


if __name__ == "__main__":
    main()
