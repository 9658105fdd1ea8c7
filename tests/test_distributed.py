"""Data parallelism over processes (rlx_jax/distributed.py): real launches of 2 and 4 processes
on 127.0.0.1 with `mlx.launch --backend ring` (tests/distributed_worker.py), checked against
plain JAX in this process; and the single-process meaning and the errors, in process."""
import os
import shutil
import signal
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax import distributed
from rlx_jax.cache import configured_root
from rlx_jax.errors import BadArgumentError, LoweringError, UnsupportedPrimitiveError

from . import distributed_transformer as transformer
from . import distributed_worker as worker
from .conftest import BACKENDS
from .where_ran import COREML_COLLECTIVES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = shutil.which("mlx.launch") or os.path.join(os.path.dirname(sys.executable),
                                                    "mlx.launch")
LAUNCH_TIMEOUT_S = 240       # a cold kernel cache: every rank builds its kernels (g++)


def free_port(n):
    """A port p with p .. p+n-1 free on 127.0.0.1 (the ring backend listens on one per rank)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + n < 65535 and all(_free(p + i) for i in range(n)):
            return p
    raise RuntimeError("no free port range on 127.0.0.1")


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def launch(n, script, *argv):
    """Runs ROOT/`script` on n processes; returns their output. The launch is killed (its
    whole process group) when it runs past LAUNCH_TIMEOUT_S."""
    if not os.path.exists(LAUNCH):
        pytest.skip("mlx.launch is not installed")
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
           # a kernel cache per script and size: launches running at once never share a lock
           "RLX_JAX_CACHE_DIR": os.path.join(
               configured_root(), f"distributed-{os.path.basename(script)[:-3]}-n{n}")}
    cmd = [LAUNCH, "--hosts", "127.0.0.1", "-n", str(n), "--backend", "ring",
           "--starting-port", str(free_port(n)), sys.executable, os.path.join(ROOT, script),
           *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=ROOT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} ran past {LAUNCH_TIMEOUT_S} s:\n{out[-4000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"
    return out


def expected_collectives(n, r):
    """What rank r of n should get from worker.collectives, from the operands of every rank."""
    xs = np.stack([worker.rank_value(i, n) for i in range(n)])
    return {"psum": xs.sum(0), "pmean": xs.mean(0), "pmax": xs.max(0), "pmin": xs.min(0),
            "gather": xs, "gather_tiled1": np.concatenate(list(xs), axis=1),
            "scatter": xs.sum(0)[r:r + 1], "index": np.int32(r),
            "shift": xs[(r - 1) % n], "grad_psum": 2 * xs[r] * n}


# 4 processes on a 2-core machine build and run slowly (42 s on a cold kernel cache): the
# slow step; 2 processes run in the default suite.
@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_launch(n, tmp_path):
    """One launch of n processes (one per test: launches never share a kernel cache)."""
    launch(n, os.path.join("tests", "distributed_worker.py"), str(tmp_path))
    ranks = [dict(np.load(os.path.join(tmp_path, f"rank{r}.npz"))) for r in range(n)]
    check_collectives(ranks)
    check_data_parallel_sgd(ranks)
    check_errors_in_a_group(ranks)


@pytest.mark.extended            # the example, as the other examples (tests/test_examples.py)
def test_example_data_parallel():
    """examples/data_parallel.py on 2 processes (it checks itself against plain JAX)."""
    out = launch(2, os.path.join("examples", "data_parallel.py"), "--steps", "5")
    assert "2 process(es)" in out and out.strip().endswith("ok")


@pytest.mark.slow                # 69 s on a cold kernel cache, 11 s warm, on 2 cores
def test_launch_transformer(tmp_path):
    """5 data-parallel SGD steps of a one-block transformer on 2 processes (4 sequences of 8
    tokens each) = 5 steps of plain JAX on the global batch of 8: parameters and losses to
    rtol 1e-4, atol 1e-5 (float32; the gap seen is under 1e-6), the same bits on every rank."""
    n = 2
    launch(n, os.path.join("tests", "distributed_transformer.py"), str(tmp_path))
    ranks = [dict(np.load(os.path.join(tmp_path, f"rank{r}.npz"))) for r in range(n)]
    params, tokens, targets = transformer.transformer_problem()
    step, losses = jax.jit(transformer.sgd_step), []
    for _ in range(transformer.STEPS):
        params, loss = step(params, (tokens, targets))
        losses.append(loss)
    assert losses[-1] < losses[0]
    for got in ranks:
        for k, v in params.items():
            np.testing.assert_allclose(got[f"p_{k}"], v, rtol=1e-4, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(got["losses"], np.stack(losses), rtol=1e-4, atol=1e-5)
    for got in ranks[1:]:
        for k in params:
            np.testing.assert_array_equal(got[f"p_{k}"], ranks[0][f"p_{k}"], err_msg=k)


def check_collectives(ranks):
    n = len(ranks)
    for r, got in enumerate(ranks):
        for name, want in expected_collectives(n, r).items():
            np.testing.assert_allclose(got[f"c_{name}"], want, rtol=1e-6, err_msg=name)


def check_data_parallel_sgd(ranks):
    """5 steps on shards of the global batch = 5 steps of plain JAX on the whole batch."""
    params, x, y = worker.mlp_problem()
    step = jax.jit(worker.sgd_step)
    for _ in range(worker.STEPS):
        params, loss = step(params, (x, y))
    for got in ranks:
        for k, v in params.items():
            np.testing.assert_allclose(got[f"p_{k}"], v, rtol=2e-5, atol=2e-6, err_msg=k)
        np.testing.assert_allclose(got["loss"], loss, rtol=2e-5)
    for got in ranks[1:]:         # every process holds the same parameters
        for k in params:
            np.testing.assert_array_equal(got[f"p_{k}"], ranks[0][f"p_{k}"])


def check_errors_in_a_group(ranks):
    for got in ranks:
        assert 'RefusalError: collectives over more than one process run only on ' \
            'backend="mlx"' in str(got["e_xla"]) and "group of one" in str(got["e_xla"])
        assert "does not split into" in str(got["e_shard"])


# ---- one process ----
@pytest.fixture
def single():
    """A group of one process (mx.distributed.init without a launcher)."""
    old = distributed.use(None)
    group = distributed.initialize()
    yield group
    distributed.use(old)


@pytest.fixture
def uninitialised():
    old = distributed.use(None)
    yield
    distributed.use(old)


def test_not_initialised_is_a_clear_error(uninitialised):
    f = rlx_jax.jit(lambda x: lax.psum(x, "batch"), backend="mlx", axis_name="batch")
    with pytest.raises(BadArgumentError, match=r"distributed.initialize\(\)"):
        f(jnp.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
@COREML_COLLECTIVES
def test_group_of_one_is_the_single_process_meaning(single, backend):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    outs = rlx_jax.jit(worker.collectives, backend=backend, axis_name="batch")(x)
    xs = x[None]
    want = {"psum": x, "pmean": x, "pmax": x, "pmin": x, "gather": xs, "gather_tiled1": x,
            "scatter": x, "index": 0, "shift": x, "grad_psum": 2 * x}
    for name, v in want.items():
        np.testing.assert_allclose(np.asarray(outs[name]), v, err_msg=name)


def test_unbound_axis_names_the_line(single):
    f = rlx_jax.jit(lambda x: lax.psum(x, "model"), backend="mlx", axis_name="batch")
    with pytest.raises(BadArgumentError, match=r"unbound axis name: model at "
                                               r"test_distributed.py:\d+.*axis_name is 'batch'"):
        f(jnp.ones(3))


def test_axis_index_groups_refused_with_the_line(single):
    f = rlx_jax.jit(lambda x: lax.psum(x, "batch", axis_index_groups=[[0]]), backend="mlx",
                    axis_name="batch")
    with pytest.raises(UnsupportedPrimitiveError,
                       match=r"(?s)axis_index_groups.*at test_distributed.py:\d+"):
        f(jnp.ones(3))


def test_axis_name_must_be_one_name():
    with pytest.raises(BadArgumentError, match="axis_name"):
        rlx_jax.jit(lambda x: x, backend="mlx", axis_name=("a", "b"))


class _Group:
    """Stands in for an mx.distributed.Group of another size."""

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size

    def rank(self):
        return 0


def test_group_size_mismatch_is_refused(single):
    lowered = rlx_jax.jit(lambda x: lax.psum(x, "batch"), backend="mlx",
                          axis_name="batch").lower(jnp.ones(3))
    distributed.use(_Group(2))
    with pytest.raises(LoweringError, match="traced for 1 processes, but the group has 2"):
        lowered.compile()(jnp.ones(3))


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "mlx"])
def test_other_backends_refuse_a_group_of_several(uninitialised, backend):
    distributed.use(_Group(2))
    f = rlx_jax.jit(lambda x: lax.psum(x, "batch"), backend=backend, axis_name="batch")
    with pytest.raises(LoweringError, match=r'(?s)only on backend="mlx".*'
                                            r'test_distributed.py:\d+.*group of one'):
        f(jnp.ones(3))


def test_pmean_of_a_pytree_is_one_all_reduce_per_dtype(single):
    """jax.lax.pmean of a gradient pytree stages one psum per leaf; the MLX program combines
    the consecutive ones of a dtype into one AllReduce over the leaves concatenated
    (backends/mlx/combine.py), and the leaves come back with their own shapes and values."""
    from rlx_jax.backends.mlx.combine import combine_all_reduces
    from rlx_jax.ir.ops import OpKind as K
    g = {"a": np.ones(3, np.float32), "b": np.arange(4, dtype=np.float32).reshape(2, 2),
         "c": np.arange(5, dtype=np.float32), "n": np.ones(2, np.int32)}
    f = rlx_jax.jit(lambda g: lax.pmean(g, "batch"), backend="mlx", axis_name="batch")
    graph = f.lower(g).legalized
    assert [n.kind for n in graph.nodes].count(K.AllReduce) == 4
    combined = combine_all_reduces(graph)
    reduced = [n for n in combined.nodes if n.kind is K.AllReduce]
    assert sorted((n.inputs[0].dtype.name, n.inputs[0].shape) for n in reduced) == [
        ("float32", (12,)), ("int32", (2,))]
    for k, v in f(g).items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(g[k], np.float32))
