"""Progress of long compiles (rlx_jax/progress.py): nothing drawn and no thread started where
progress is off (the test suite's captured stderr); with RLX_JAX_PROGRESS=1 a delayed tqdm bar
names the IR rewrite over a large graph, and MLX's kernel build with the libraries built so
far."""
import os
import re
import subprocess
import sys
import threading

import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import progress

from .conftest import BACKENDS


def test_off_under_capture_draws_nothing(monkeypatch, capfd):
    monkeypatch.delenv("RLX_JAX_PROGRESS", raising=False)
    assert not progress.enabled()              # pytest captures stderr: not a terminal
    items = [1, 2, 3]
    assert progress.bar(items, "x") is items
    threads = threading.active_count()
    with progress.watch("y", lambda: 0):
        assert threading.active_count() == threads
    rlx_jax.jit(lambda x: jnp.tanh(x) * 2, backend="xla")(np.ones(3, np.float32))
    assert "rlx_jax:" not in capfd.readouterr().err


def test_rewrite_shows_its_name(monkeypatch, capfd):
    """A recognition pass over a graph, with no delay: its bar, named, on stderr, then cleared."""
    monkeypatch.setenv("RLX_JAX_PROGRESS", "1")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    x = np.ones((4, 8), np.float32)
    rlx_jax.jit(lambda x: jnp.mean(jnp.tanh(x) ** 2), backend="xla").lower(x)
    err = capfd.readouterr().err
    assert re.search(r"rlx_jax: recognising patterns: .*\d+/\d+ ", err), err[-500:]


SCRIPT = """
import jax.numpy as jnp, numpy as np, rlx_jax
from rlx_jax import progress
progress.DELAY_S, progress.POLL_S = 0.0, 0.01

def odd_program(x):
    return jnp.sin(x * 3.25) * jnp.exp(-x) + 0.5

rlx_jax.jit(odd_program, backend="mlx")(np.linspace(0, 1, 7, dtype=np.float32))
"""


@pytest.mark.skipif("mlx" not in BACKENDS, reason="MLX is not installed")
def test_mlx_kernel_build_counts_libraries(tmp_path):
    """A first call building kernels into an empty cache (a fresh process: MLX fixes its kernel
    directory at its first build): the watch bar names the program and counts the kernel
    libraries MLX wrote while it ran."""
    from rlx_jax.backends.mlx.runtime import compile_unavailable_reason
    if compile_unavailable_reason():
        pytest.skip(compile_unavailable_reason())
    env = dict(os.environ, RLX_JAX_CACHE_DIR=str(tmp_path), RLX_JAX_PROGRESS="1",
               JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rlx_jax: building MLX kernels for 'odd_program'" in r.stderr, r.stderr[-500:]
    assert re.search(r"odd_program': [1-9]\d*kernel", r.stderr), r.stderr[-500:]
