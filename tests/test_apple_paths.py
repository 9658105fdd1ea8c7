"""Code that runs only on macOS, exercised on Linux as far as that is honest.

The Core ML runtime path (`CoremlExecutable` handing the saved package to
`coremltools.models.MLModel` and calling its `predict`) is taken here with the platform check
forced and `MLModel` replaced by a stand-in that holds rlx_jax to MLModel's documented contract
(a package path and a `ct.ComputeUnit`; `predict` takes a dict of input name -> numpy array of
the declared shape and dtype and returns a dict of output name -> array) and computes with the
MIL reference executor. What this checks is rlx_jax's side of the call; Core ML itself has never
run here (docs/guarantees.md). The MLX side (the Metal default device's float64 placement) is
tested in tests/test_mlx.py with the GPU flag forced.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.coreml.package import runtime
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor

_ARRAY_TYPES = {65568: np.float32, 65552: np.float16, 131104: np.int32}  # MLMultiArray codes


class StandInMLModel:
    """What CoremlExecutable may rely on of coremltools.models.MLModel, strictly: the feeds
    must be exactly the model's inputs with their declared shapes and array types."""
    made = []
    real = None        # coremltools' own class, which ct.convert itself uses (skip_model_load)

    def __new__(cls, path, **kwargs):
        if set(kwargs) - {"compute_units"}:          # ct.convert's call, not rlx_jax's
            return cls.real(path, **kwargs)
        return super().__new__(cls)

    def __init__(self, path, compute_units=None):
        import coremltools as ct
        assert isinstance(compute_units, ct.ComputeUnit), compute_units
        self.spec = ct.utils.load_spec(path)
        self.path, self.compute_units = path, compute_units
        self._run = MilReferenceExecutor(path)
        StandInMLModel.made.append(self)

    def predict(self, data):
        inputs = {i.name: i.type.multiArrayType for i in self.spec.description.input}
        assert set(data) == set(inputs), (sorted(data), sorted(inputs))
        for name, arr in data.items():
            t = inputs[name]
            assert isinstance(arr, np.ndarray), type(arr)
            assert tuple(arr.shape) == tuple(t.shape), (name, arr.shape, tuple(t.shape))
            assert arr.dtype == _ARRAY_TYPES[t.dataType], (name, arr.dtype, t.dataType)
        outs = self._run(dict(data))
        assert set(outs) == {o.name for o in self.spec.description.output}
        return outs


@pytest.fixture
def on_macos(monkeypatch, tmp_path):
    import coremltools as ct
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "coreml_runtime_available", lambda: True)
    StandInMLModel.real = ct.models.MLModel
    monkeypatch.setattr(ct.models, "MLModel", StandInMLModel)
    StandInMLModel.made.clear()
    return StandInMLModel


@pytest.mark.parametrize("units,name", [("all", "ALL"), ("cpu_and_ne", "CPU_AND_NE")])
def test_the_core_ml_path_hands_mlmodel_the_package_and_named_typed_feeds(on_macos, units,
                                                                          name):
    import coremltools as ct

    def f(x, i):
        return jnp.tanh(x @ x.T) * 2.0 + i.astype(jnp.float32).sum(), i + 1
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    i = np.arange(3, dtype=np.int32)
    jitted = rlx_jax.jit(f, backend="coreml", compute_units=units)
    compiled = jitted.lower(x, i).compile()
    assert compiled.runtime == "coreml"
    got = compiled(x, i)
    want = jax.jit(f)(x, i)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
    (model,) = on_macos.made
    assert model.compute_units == getattr(ct.ComputeUnit, name)
    assert model.path == compiled.executable.package_path
    rlx_jax.testing.assert_ran_on_device(compiled)
