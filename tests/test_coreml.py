"""Core ML backend: exact MIL op types, .mlpackage round trip, dtype/rank
refusals, options, cache. Runs everywhere: on Linux the saved package is executed by the MIL
reference executor, on macOS by Core ML."""
import os
import sys

import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax import errors
from rlx_jax.backends.coreml import package
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
from rlx_jax.backends.coreml.package.runtime import coreml_runtime_available

R = np.random.RandomState(0)


def f32(*shape):
    return R.uniform(-2, 2, shape).astype(np.float32)


def mil_ops(fn, *args, **options):
    options.setdefault("optimize", "fast")
    return rlx_jax.jit(fn, backend="coreml", **options).lower(*args).op_counts(level="backend")


# ---- structure: exact MIL op types ----

def test_dense_relu_is_matmul_add_maximum():
    """Given:  relu(x @ w + b), x (2, 3), w (3, 4), b (4,)
       Result: matmul, reshape (b), add, maximum, and the NaN guard of the maximum
               (not_equal, select: MIL's maximum promises nothing for NaN); the select is
               the output itself (no identity)"""
    def f(w, b, x):
        return jax.nn.relu(x @ w + b)
    ops = mil_ops(f, f32(3, 4), f32(4), f32(2, 3))
    assert ops == {"matmul": 1, "reshape": 1, "add": 1, "maximum": 1, "not_equal": 1,
                   "select": 1}


def test_dot_general_uses_matmul_transpose_flags():
    """Given:  dot_general(x, w) contracting dim 1 of both, x (2, 3), w (5, 3)
       Result: matmul(transpose_y=True): no separate transpose"""
    f = lambda x, w: lax.dot_general(x, w, (((1,), (1,)), ((), ())))   # noqa: E731
    ops = mil_ops(f, f32(2, 3), f32(5, 3))
    assert ops == {"matmul": 1}
    prog = rlx_jax.jit(f, backend="coreml").lower(f32(2, 3), f32(5, 3))
    assert "transpose_y=True" in prog.as_text(level="backend")


def test_batched_dot_general_is_one_matmul():
    """Given:  einsum("bij,bjk->bik", a, b)
       Result: matmul"""
    f = lambda a, b: jnp.einsum("bij,bjk->bik", a, b)   # noqa: E731
    assert mil_ops(f, f32(2, 3, 4), f32(2, 4, 5)) == {"matmul": 1}


def test_max_pool_nhwc_is_native_max_pool():
    """Given:  reduce_window max, 2x2 window and stride over H, W of an NHWC tensor
       Result: one max_pool; no slice_by_index"""
    f = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    ops = mil_ops(f, f32(2, 4, 4, 3))
    assert ops.get("max_pool") == 1 and "slice_by_index" not in ops


def test_max_pool_backward_is_o_window():
    """Given:  jax.grad of sum(2x2 max pool (stride 2) of x), x (2, 8, 8, 3)
       Result: fewer than 60 MIL ops in all, no scatter_nd (not the N^2 scatter)"""
    def loss(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID").sum()
    ops = mil_ops(jax.grad(loss), f32(2, 8, 8, 3))
    assert "scatter_nd" not in ops and sum(ops.values()) < 60, ops


def test_gather_is_gather_nd():
    """Given:  x[i], x (5, 3), i = [0, 4, 2]
       Result: one gather_nd"""
    ops = mil_ops(lambda x, i: x[i], f32(5, 3), np.array([0, 4, 2], np.int32))
    assert ops.get("gather_nd") == 1


# ---- round trip: export, reload, names, numerics ----

def test_export_round_trip(tmp_path):
    params = {"w": f32(3, 4), "b": f32(4)}
    x = f32(2, 3)

    def model_apply(params, x):
        return {"y": jax.nn.relu(x @ params["w"] + params["b"]), "s": x.sum()}

    path = rlx_jax.export_coreml(model_apply, params, x, path=str(tmp_path / "m.mlpackage"),
                                 optimize="fast")
    assert os.path.isdir(path)
    spec = ct.utils.load_spec(path)
    assert [i.name for i in spec.description.input] == ["params_b", "params_w", "x"]
    assert sorted(o.name for o in spec.description.output) == ["output_s", "output_y"]
    meta = dict(spec.description.metadata.userDefined)
    assert meta["rlx_jax.function"] == "test_export_round_trip.<locals>.model_apply"
    assert meta["rlx_jax.version"] == rlx_jax.__version__
    ex = MilReferenceExecutor(path)
    out = ex({"params_b": params["b"], "params_w": params["w"], "x": x})
    want = model_apply(params, x)
    np.testing.assert_allclose(out["output_y"], want["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["output_s"].reshape(()), want["s"], rtol=1e-6)


def test_jit_packages_are_named_after_pytree_paths():
    def f(params, x, scale=2.0):
        return {"y": x @ params["w"] * scale, "z": x.sum()}

    params, x = {"w": f32(3, 2)}, f32(4, 3)
    compiled = rlx_jax.jit(f, backend="coreml", optimize="fast").lower(params, x,
                                                                         scale=3.0).compile()
    spec = ct.utils.load_spec(compiled.executable.package_path)
    assert [i.name for i in spec.description.input] == ["params_w", "x", "scale"]
    assert sorted(o.name for o in spec.description.output) == ["output_y", "output_z"]
    got = compiled(params, x, scale=3.0)
    np.testing.assert_allclose(got["y"], x @ params["w"] * 3.0, rtol=1e-6)


def test_export_requires_mlpackage_path(tmp_path):
    with pytest.raises(errors.BadArgumentError):
        rlx_jax.export_coreml(jnp.sin, f32(2), path=str(tmp_path / "m.bin"))


def test_runtime_is_reported():
    f = rlx_jax.jit(jnp.sin, backend="coreml", optimize="fast")
    c = f.lower(f32(3)).compile()
    assert c.runtime == ("coreml" if coreml_runtime_available() else "mil-reference")
    x = np.float32([0.5, 1.0, -2.0])
    np.testing.assert_allclose(c(x), np.sin(x), rtol=1e-6)


def test_bool_and_scalar_boundaries():
    f = rlx_jax.jit(lambda x, m: (jnp.where(m, x, 0.0).sum(), m & (x > 0)), backend="coreml",
                    optimize="fast")
    x, m = f32(4), np.array([True, False, True, True])
    s, b = f(x, m)
    assert np.asarray(s).shape == () and np.asarray(b).dtype == np.bool_
    np.testing.assert_allclose(s, np.where(m, x, 0).sum(), rtol=1e-6)
    np.testing.assert_array_equal(b, m & (x > 0))


def test_gradient_of_mlp_matches_jax():
    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)
    p = {"w1": f32(4, 8), "b1": f32(8), "w2": f32(8, 2)}
    x, y = f32(16, 4), f32(16, 2)
    got = rlx_jax.jit(jax.grad(loss), backend="coreml", optimize="fast")(p, x, y)
    want = jax.grad(loss)(p, x, y)
    for k in p:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


# ---- dtype and rank legality ----

def test_bfloat16_is_refused_naming_the_node():
    with pytest.raises(errors.LegalizationError,
                       match=r"Activation.*test_coreml.py:\d+.*\n.*bf16\[3\].*no bfloat16 tensors"):
        rlx_jax.jit(lambda x: jnp.sin(x), backend="coreml", fallback="error")(
            jnp.ones(3, jnp.bfloat16))


def test_rank_above_five_is_refused():
    with pytest.raises(errors.LegalizationError, match="rank 6 > 5"):
        rlx_jax.jit(lambda x: x.reshape(1, 1, 1, 1, 2, 3) * 2, backend="coreml",
                    fallback="error")(f32(2, 3))


def test_uint32_inputs_are_refused():
    with pytest.raises(errors.LegalizationError, match="uint32"):
        rlx_jax.jit(lambda x: x + 1, backend="coreml", fallback="error")(
            np.arange(3, dtype=np.uint32))


def test_int8_arithmetic_refused_but_uint8_cast_is_exact():
    with pytest.raises(errors.LegalizationError, match="int8"):
        rlx_jax.jit(lambda x: x + x, backend="coreml", fallback="error")(
            np.arange(3, dtype=np.int8))
    img = np.array([0, 7, 128, 255], np.uint8)
    got = rlx_jax.jit(lambda x: x.astype(jnp.float32) / 255, backend="coreml",
                      optimize="fast")(img)
    np.testing.assert_array_equal(got, img.astype(np.float32) / 255)


def test_uint32_provably_in_range_is_narrowed():
    def f(x):
        k = lax.iota(jnp.uint32, 4) * jnp.uint32(2) + jnp.uint32(1)
        return k.astype(jnp.float32) * x, k
    x = f32(4)
    got, k = rlx_jax.jit(f, backend="coreml", optimize="fast")(x)
    want, kw = f(x)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(k).dtype == np.uint32
    np.testing.assert_array_equal(k, kw)


# ---- options ----

def test_unknown_option_is_refused():
    with pytest.raises(errors.BadArgumentError, match="unknown option.*bogus.*compute_precision"):
        rlx_jax.jit(jnp.sin, backend="coreml", bogus=1)


@pytest.mark.parametrize("opt", [{"compute_units": "gpu"}, {"compute_precision": "int8"},
                                 {"optimize": "max"}, {"minimum_deployment_target": "iOS15"},
                                 {"minimum_deployment_target": "iOS99"}])
def test_bad_option_values(opt):
    with pytest.raises(errors.BadArgumentError):
        rlx_jax.jit(jnp.sin, backend="coreml", **opt)(f32(2))


@pytest.mark.parametrize("optimize", ["default", "fast"])
def test_float16_precision_and_target(tmp_path, optimize):
    f = lambda x: jnp.exp(x) @ x.T   # noqa: E731
    x = f32(3, 4)
    path = rlx_jax.export_coreml(f, x, path=str(tmp_path / "h.mlpackage"), optimize=optimize,
                                 compute_precision="float16", minimum_deployment_target="iOS17")
    spec = ct.utils.load_spec(path)
    assert spec.specificationVersion == 8            # iOS17
    assert "fp16" in str(spec.mlProgram)
    got = MilReferenceExecutor(path)({"x": x})["output"]
    np.testing.assert_allclose(got, f(x), rtol=2e-2, atol=2e-2)
    exact = rlx_jax.jit(f, backend="coreml", compute_precision="float32")(x)
    np.testing.assert_allclose(exact, f(x), rtol=1e-5, atol=1e-5)


def test_cache_reuses_package(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    x = f32(3)
    c1 = rlx_jax.jit(jnp.cos, backend="coreml", optimize="fast").lower(x).compile()
    path = c1.executable.package_path
    assert path.startswith(str(tmp_path / "coreml")) and path.endswith(".mlpackage")
    calls = []
    convert = package.convert
    monkeypatch.setattr(package, "convert", lambda *a, **k: calls.append(1) or convert(*a, **k))
    c2 = rlx_jax.jit(jnp.cos, backend="coreml", optimize="fast").lower(x).compile()
    assert c2.executable.package_path == path and calls == []
    c3 = rlx_jax.jit(jnp.cos, backend="coreml", optimize="default").lower(x).compile()
    assert c3.executable.package_path != path and calls == [1]


def test_package_hash_covers_the_lowering_source():
    """Given:  the files the cache key hashes (package.code_files)
       Result: the MIL rules and program builder, the graph passes and the package code: a
               changed lowering never reuses a package built by the old one"""
    files = package.code_files()
    for f in ("mil/program.py", "mil/legality.py", "mil/elementwise.py", "passes/rank.py",
              "package/__init__.py", "backend.py"):
        assert f in files
    assert len(files) == len(set(files))


def test_scalar_bool_values_broadcast():
    f = lambda x: jnp.where(x.sum() > 0, x, -x)   # noqa: E731
    for x in (f32(2, 3), -np.abs(f32(2, 3))):
        np.testing.assert_array_equal(rlx_jax.jit(f, backend="coreml", optimize="fast")(x),
                                      f(x))


def test_conv_layouts_are_transposes_around_one_conv():
    """Given:  conv_general_dilated in NHWC/HWIO/NHWC; and the same conv in NCHW/OIHW/NCHW
       Result: NHWC: conv, 3 transposes (input, kernel, output); NCHW: conv; NHWC values
               equal JAX"""
    x, w = f32(2, 8, 8, 3), f32(3, 3, 3, 4)
    nhwc = lambda x, w: lax.conv_general_dilated(   # noqa: E731
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert mil_ops(nhwc, x, w) == {"conv": 1, "transpose": 3}
    nchw = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID")   # noqa: E731
    xt, wt = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
    assert mil_ops(nchw, xt, wt) == {"conv": 1}
    np.testing.assert_allclose(rlx_jax.jit(nhwc, backend="coreml")(x, w), nhwc(x, w),
                               rtol=1e-5, atol=1e-5)


def test_conversion_progress_only_in_a_terminal(monkeypatch, capfd):
    """coremltools' pass-pipeline bars: off when stderr is not a terminal (the test suite, logs,
    pipes: nothing printed), on with a delay in a terminal or with RLX_JAX_PROGRESS=1, off with
    RLX_JAX_PROGRESS=0."""
    from coremltools.converters.mil.mil.passes import pass_pipeline

    from rlx_jax.backends.coreml.package import progress_bars
    from rlx_jax.progress import DELAY_S as PROGRESS_DELAY_S
    monkeypatch.delenv("RLX_JAX_PROGRESS", raising=False)
    rlx_jax.jit(lambda x: jnp.tanh(x) * 2, backend="coreml")(f32(3, 5))
    assert "Running MIL" not in capfd.readouterr().err
    for setting, shown in (("1", True), ("0", False)):
        monkeypatch.setenv("RLX_JAX_PROGRESS", setting)
        with progress_bars():
            kw = pass_pipeline.tqdm.keywords
        assert (kw == {"delay": PROGRESS_DELAY_S, "leave": False}) == shown
        assert kw.get("disable", False) == (not shown)
    monkeypatch.delenv("RLX_JAX_PROGRESS")

    class Terminal:
        def isatty(self):
            return True

        def write(self, text):
            return len(text)

        def flush(self):
            pass
    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress_bars():
        assert pass_pipeline.tqdm.keywords == {"delay": PROGRESS_DELAY_S, "leave": False}
