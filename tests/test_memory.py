"""Memory: cached calls and retraces must not grow the resident set without bound.

Measured in a fresh subprocess (RSS from /proc/self/statm after gc): 1,000 cached calls, then
200 retraces (clear_cache + call, i.e. trace, legalize, lower and load the cached kernel or
package again). Bounds: < 512 KB of growth between the 500th and the 1,000th cached call (a leak
of 1 KB a call fails it); < 16 KB a retrace between the 20th and the 200th.
"""
import json
import os
import subprocess
import sys

import pytest

import rlx_jax

BACKENDS = rlx_jax.available_backends()
CALL_GROWTH = 512 * 1024
RETRACE_GROWTH = 16 * 1024

MEASURE = """
import gc, json, os, sys
import numpy as np, jax, jax.numpy as jnp, rlx_jax
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
fn = lambda x, y: jnp.tanh(x @ y) * 0.5 + jnp.sum(x)
x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
y = np.ones((8, 4), np.float32)
want = np.asarray(jax.jit(fn)(x, y))
f = rlx_jax.jit(fn, backend=sys.argv[1])
calls, retraces = {}, {}
for i in range(1, 1001):
    out = f(x, y)
    if i in (100, 500, 1000):
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
        calls[i] = rss()
for i in range(1, 201):
    f.clear_cache()
    np.testing.assert_allclose(np.asarray(f(x, y)), want, rtol=1e-5, atol=1e-5)
    if i in (20, 200):
        retraces[i] = rss()
assert f.trace_count == 201
print(json.dumps({"calls": calls, "retraces": retraces}))
"""


def _measure(backend, tmp_path):
    # one malloc arena: on a loaded machine glibc opens an arena per busy compile thread, and
    # that growth (not a leak, and not ours) would swamp the bound
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "RLX_JAX_CACHE_DIR": str(tmp_path),
           "MALLOC_ARENA_MAX": "1"}
    r = subprocess.run([sys.executable, "-c", MEASURE, backend], env=env, text=True,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    calls, retraces = m["calls"], m["retraces"]
    per_call = (calls["1000"] - calls["500"]) / 500
    per_retrace = (retraces["200"] - retraces["20"]) / 180
    print(f"{backend}: cached calls 500->1000 {per_call * 500 / 1024:.0f} KB, retraces "
          f"20->200 {per_retrace / 1024:.1f} KB each, RSS {retraces['200'] / 2**20:.0f} MB")
    assert per_call * 500 < CALL_GROWTH, (backend, calls)
    assert per_retrace < RETRACE_GROWTH, (backend, retraces)


@pytest.mark.parametrize("backend", [b for b in ("mlx", "coreml") if b in BACKENDS])
def test_cached_calls_and_retraces_do_not_grow_memory(backend, tmp_path):
    _measure(backend, tmp_path)


@pytest.mark.slow
def test_cached_calls_and_retraces_do_not_grow_memory_xla(tmp_path):
    _measure("xla", tmp_path)


@pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is missing")
def test_reference_executor_leaves_no_names_behind():
    """Each re-issued MIL op used to leave a new key in coremltools' global Builder name
    counter (a few KB per call, forever)."""
    import numpy as np
    from coremltools.converters.mil import Builder
    f = rlx_jax.jit(lambda x: (x * 2 + 1).sum(), backend="coreml", optimize="fast")
    x = np.ones((2, 3), np.float32)
    f(x)
    if f.lower(x).compile().executable.runtime != "mil-reference":
        pytest.skip("Core ML itself runs the package here")
    before = len(Builder.name_count)
    for _ in range(20):
        f(x)
    assert len(Builder.name_count) <= before
