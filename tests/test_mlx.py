"""The mlx backend itself: dtypes, argument and result types, training loops
that feed results back, the kernel-cache directory, the uncompiled fallback, error messages."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors

pytestmark = pytest.mark.skipif("mlx" not in rlx_jax.available_backends(),
                                reason="mlx is not installed")
if "mlx" in rlx_jax.available_backends():
    import mlx.core as mx

    from rlx_jax.backends.mlx.runtime import backing_array, cache_dir, mlx_to_np_dtype, to_numpy


def _python(code, **env):
    """Runs `code` in a fresh interpreter (JAX on CPU, extra environment `env`)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", **env})


def test_listed_first_and_picked_by_auto():
    assert rlx_jax.available_backends()[0] == "mlx"
    f = rlx_jax.jit(lambda x: x * 2)
    out = f(np.ones(3, np.float32))
    assert isinstance(out, jax.Array)
    assert f._cache[next(iter(f._cache))].lowered.backend.name == "mlx"


DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.int16, np.int32, np.uint8,
          np.uint16, np.uint32, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_round_trip(dtype):
    x = (np.arange(12).reshape(3, 4) % 5).astype(dtype)

    def f(a):
        return a.T, (a == a[0]), jnp.max(a, axis=0)
    want = jax.jit(f)(x)
    got = rlx_jax.jit(f, backend="mlx", output="native")(x)
    for g, w in zip(got, want):
        assert mlx_to_np_dtype(g.dtype) == w.dtype
        np.testing.assert_array_equal(to_numpy(g), np.asarray(w))


@pytest.mark.x64
def test_64_bit_dtypes_under_x64():
    """int64/uint64 exactly; float64 transcendental functions to double precision (MLX's own
    float64 exp/sin/cos/erf/erfinv are float32-accurate, mathfns64 replaces them)."""
    code = ("import jax, numpy as np, rlx_jax\n"
            "jax.config.update('jax_enable_x64', True)\n"
            "import jax.numpy as jnp\n"
            "from jax import lax\n"
            "f = lambda a, b, c: (a * 3 + 1, b // 3, c >> 2, a.sum(), jnp.exp(a * 30),\n"
            "    jnp.sin(a * 40), jnp.cos(a * 40), lax.erf(a * 4 - 2), lax.erfc(a * 8 - 2),\n"
            "    lax.erf_inv(a * 1.9 - 0.95), lax.lgamma(a * 9 - 4.5), jax.nn.sigmoid(a * 9),\n"
            "    jax.nn.gelu(a, approximate=False), jax.nn.silu(a))\n"
            "args = (np.linspace(0, 1, 7), np.arange(-5, 5, dtype=np.int64) * 10**12,\n"
            "        np.arange(5, dtype=np.uint64) << 40)\n"
            "want = jax.jit(f)(*args)\n"
            "got = rlx_jax.jit(f, backend='mlx', output='numpy')(*args)\n"
            "for g, w in zip(got, want):\n"
            "    assert g.dtype == w.dtype, (g.dtype, w.dtype)\n"
            "    np.testing.assert_allclose(g, np.asarray(w), rtol=1e-13, atol=1e-300)\n"
            "print('ok')\n")
    r = _python(code)
    assert r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def _f(x, y, s):
    return jnp.tanh(x) @ y + s


@pytest.mark.parametrize("kind", ["mlx", "numpy", "jax", "scalar"])
def test_argument_types(kind):
    r = np.random.RandomState(0)
    x, y = r.randn(3, 4).astype(np.float32), r.randn(4, 2).astype(np.float32)
    want = np.asarray(_f(x, y, 2.0))
    conv = {"mlx": mx.array, "numpy": np.asarray, "jax": jnp.asarray,
            "scalar": np.asarray}[kind]
    s = 2.0 if kind == "scalar" else conv(np.float32(2.0))
    got = rlx_jax.jit(_f, backend="mlx")(conv(x), conv(y), s)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_mlx_argument_dtype_is_read_by_jit():
    out = rlx_jax.jit(lambda a: a + 1, backend="mlx", output="native")(
        mx.array([1, 2], dtype=mx.int16))
    assert out.dtype == mx.int16 and to_numpy(out).tolist() == [2, 3]
    assert mlx_to_np_dtype(mx.bfloat16) == np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("output,typ", [("native", "mx"), ("numpy", np.ndarray),
                                        ("jax", jax.Array)])
def test_output_option(output, typ):
    typ = mx.array if typ == "mx" else typ
    f = rlx_jax.jit(lambda x: (x + 1, {"b": (x * 2).astype(jnp.bfloat16)}), backend="mlx",
                    output=output)
    a, d = f(np.arange(3, dtype=np.float32))
    assert isinstance(a, typ) and isinstance(d["b"], typ)
    np.testing.assert_array_equal(np.asarray(a) if typ is not mx.array else to_numpy(a),
                                  [1, 2, 3])
    b = to_numpy(d["b"]) if typ is mx.array else np.asarray(d["b"])
    assert b.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(b.astype(np.float32), [0, 2, 4])


def test_bad_options_are_refused():
    with pytest.raises(errors.BadArgumentError, match="output"):
        rlx_jax.jit(lambda x: x, backend="mlx", output="torch")
    with pytest.raises(errors.BadArgumentError, match="unknown option"):
        rlx_jax.jit(lambda x: x, backend="mlx", fast=True)
    with pytest.raises(errors.BadArgumentError, match="compile"):
        rlx_jax.jit(lambda x: x, backend="mlx", compile="yes")


def _loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)


def _step(p, x, y):
    loss, g = jax.value_and_grad(_loss)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), loss


@pytest.mark.parametrize("output", ["jax", "native"])
def test_training_loop_feeds_results_back_without_copies(output):
    """Results fed back are not converted: mx.arrays as they are; jax.Arrays (the default
    output) by the mx.array each one remembers."""
    r = np.random.RandomState(1)
    p = {"w1": r.randn(4, 8).astype(np.float32) * .5, "b1": np.zeros(8, np.float32),
         "w2": r.randn(8, 1).astype(np.float32) * .5}
    x, y = r.randn(16, 4).astype(np.float32), r.randn(16, 1).astype(np.float32)
    step = rlx_jax.jit(_step, backend="mlx", output=output)
    pj, pm = p, p
    xm, ym = mx.array(x), mx.array(y)
    for _ in range(5):
        pj, lj = jax.jit(_step)(pj, x, y)
        pm, lm = step(pm, xm, ym)
        np.testing.assert_allclose(np.asarray(lm), np.asarray(lj), rtol=1e-5)
    assert step.trace_count == 1      # numpy and mx.array arguments share one executable
    exe = next(iter(step._cache.values())).executable
    leaves = jax.tree.leaves(pm)
    native = leaves if output == "native" else [backing_array(a) for a in leaves]
    assert all(isinstance(a, mx.array if output == "native" else jax.Array) for a in leaves)
    assert all(isinstance(b, mx.array) for b in native)
    assert all(a is b for a, b in zip(exe.inputs(leaves), native))   # no conversion, no copy
    for k in p:
        np.testing.assert_allclose(np.asarray(pm[k]), np.asarray(pj[k]), rtol=1e-4, atol=1e-6)


def test_kernel_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "user_tmp"))
    f = rlx_jax.jit(lambda x: jnp.cos(jnp.sin(x) * 1.75) - 0.5 * x, backend="mlx")
    f(np.ones((3, 7), np.float32))
    compiled = next(iter(f._cache.values())).executable
    if not compiled.compiled:
        pytest.skip(f"mx.compile is unavailable here: {compiled.why_uncompiled}")
    assert cache_dir() == str(tmp_path / "mlx")
    built = [p for p in (tmp_path / "mlx").rglob("*.so")]
    assert built, "no kernel was built under the package's cache directory"
    assert os.environ["TMPDIR"] == str(tmp_path / "user_tmp")    # restored after the build
    assert not (tmp_path / "user_tmp").exists()


def test_uncompiled_fallback_says_why():
    code = ("import os, numpy as np, rlx_jax, jax.numpy as jnp\n"
            "from absl import logging\n"
            "f = rlx_jax.jit(lambda x: jnp.exp(x) + 1, backend='mlx')\n"
            "out = f(np.zeros(3, np.float32)); f(np.ones(4, np.float32))\n"
            "exe = next(iter(f._cache.values())).executable\n"
            "assert not exe.compiled and exe.runtime == 'mlx-eager'\n"
            "np.testing.assert_allclose(np.asarray(out), [2, 2, 2])\n"
            "print('ok')\n")
    r = _python(code, RLX_JAX_MLX_COMPILE="0")
    assert r.stdout.strip().endswith("ok"), r.stderr[-2000:]
    assert r.stderr.count("RLX_JAX_MLX_COMPILE=0 is set") == 1, r.stderr[-2000:]
    assert r.stderr.count("running uncompiled") == 1, r.stderr


def test_compile_false_option():
    f = rlx_jax.jit(lambda x: x * 3, backend="mlx", compile=False)
    np.testing.assert_array_equal(np.asarray(f(np.ones(2, np.float32))), [3, 3])
    assert next(iter(f._cache.values())).runtime == "mlx-eager"


@pytest.mark.host("expm1 on complex64 runs on the host (under test)")
def test_unsupported_dtype_runs_on_the_host_or_is_refused_naming_it():
    """Given: expm1 on complex64, which backend 'mlx' refuses. Result: the op runs on the host
    (a jax.Array result equal to JAX's); with fallback="error", a LegalizationError names the
    op, the dtype, the node and the source line."""
    def f(x):
        return jnp.expm1(x) * 2
    x = np.ones(3, np.complex64) * (1 + 2j)
    got = rlx_jax.jit(f, backend="mlx")(x)
    assert isinstance(got, jax.Array) and got.dtype == np.complex64
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(f)(x)), rtol=1e-6)
    with pytest.raises(errors.LegalizationError) as e:
        rlx_jax.jit(f, backend="mlx", fallback="error")(x)
    msg = str(e.value)
    assert "expm1] on complex64" in msg and "test_mlx.py:" in msg and "'f'" in msg


def test_float64_is_refused_on_the_gpu(monkeypatch):
    from rlx_jax.backends.mlx import lower as mlx_lower
    from rlx_jax.frontend.trace import trace
    with jax.enable_x64(True):
        graph = trace(lambda x: x + 1, np.ones(2, np.float64))
    monkeypatch.setattr(mlx_lower.mx, "default_device", lambda: mx.Device(mx.gpu))
    with pytest.raises(errors.LoweringError, match="float64 on the GPU"):
        mlx_lower.check_dtypes(graph)


@pytest.mark.host("float64 has no Metal kernels: with the GPU flag forced its ops go to the host")
def test_float64_ops_are_placed_on_the_host_when_the_default_device_is_the_gpu(monkeypatch):
    """Given: a float32 program with a float64 step, the default device reported as the GPU
    (as on Apple silicon; forced here, MLX still computes on the CPU). Result: the placement
    puts exactly the float64 ops on the host with Metal's reason, the float32 ops on the
    device, and the result equals JAX's."""
    def f(x):
        y = jnp.tanh(x) * 3.0
        z = (y.astype(jnp.float64) ** 2).sum()        # float64 on the host
        return y + z.astype(jnp.float32)
    x = np.linspace(-1, 1, 6).astype(np.float32)
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu))
    with jax.enable_x64(True):
        jitted = rlx_jax.jit(f, backend="mlx")
        placement = jitted.lower(x).placement()
        got = np.asarray(jitted(x))
        want = np.asarray(jax.jit(f)(x))
    ops = placement.host_ops()
    assert ops and all("no float64 on the GPU (Metal)" in why for _, why in ops), str(placement)
    assert all(any(v.dtype == np.float64 for v in n.inputs + n.outputs) for n, _ in ops)
    assert [s.placement for s in placement.segments][:2] == ["device", "host"], str(placement)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    monkeypatch.undo()                            # the CPU: the same program, all on the device
    with jax.enable_x64(True):
        assert rlx_jax.jit(f, backend="mlx").lower(x).placement().device_only


def test_unavailable_without_mlx():
    code = ("import sys; sys.modules['mlx'] = None; sys.modules['mlx.core'] = None\n"
            "import rlx_jax\n"
            "from rlx_jax.backends.base import all_backends\n"
            "b = all_backends()['mlx']\n"
            "assert not b.available() and 'mlx' in b.unavailable_reason()\n"
            "assert 'mlx' not in rlx_jax.available_backends()\n"
            "try:\n"
            "    rlx_jax.jit(lambda x: x, backend='mlx')(1.0)\n"
            "except rlx_jax.errors.BackendUnavailableError as e:\n"
            "    print('refused:', e)\n")
    r = _python(code)
    assert "refused:" in r.stdout and "import mlx.core" in r.stdout, r.stderr[-2000:]
