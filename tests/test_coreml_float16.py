"""float16 as Core ML computes it: a package built with compute_precision="float16" is typed
float16 op by op (coremltools' FP16ComputePrecision pass, with casts at the float32 inputs and
outputs), and the MIL reference executor computes each op from its float16 operands and rounds
its result to float16, so overflow (|x| > 65,504 -> inf) and float16's loss of accuracy show on
Linux as they would on the device. Oracle: JAX on CPU (float32, or float16 where stated).
Every program here runs whole on Core ML (placement().device_only)."""
import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
import rlx_jax.nn as rnn
from rlx_jax.backends.coreml.package.runtime import coreml_runtime_available, computes_in_float16

R = np.random.RandomState(0)
BASE = "coreml" if coreml_runtime_available() else "mil-reference"
F16_MAX = float(np.finfo(np.float16).max)          # 65504


def compiled(fn, args, precision):
    lowered = rlx_jax.jit(fn, backend="coreml", compute_precision=precision).lower(*args)
    assert lowered.placement().device_only
    return lowered.compile()


def run(fn, args, precision):
    return np.asarray(compiled(fn, args, precision)(*args))


# ---- overflow: activations above 65,504 ----

def _exp_sum(x):
    return jnp.sum(jnp.exp(x) * 1e3, axis=-1)


def _matmul_sum(x, w):
    return jnp.sum(x @ w, axis=-1)


OVERFLOW = {
    # exp(x) * 1e3 passes 65,504 at x ~ 4.2: the second row's terms do, the first's sum ~7e3
    "exp": (_exp_sum, lambda: [np.stack([np.linspace(-3, 1, 8), np.linspace(0, 6, 8)])
                               .astype(np.float32)]),
    # products of ~300 * ~300 summed over 4: ~3.6e5 in the second row, ~36 in the first
    "matmul": (_matmul_sum, lambda: [np.array([[1.0, 2, 3, 4], [300, 310, 290, 305]], np.float32),
                                     R.uniform(1, 3, (4, 3)).astype(np.float32) *
                                     np.float32([[1], [1], [1], [100]])]),
}


@pytest.mark.parametrize("case", sorted(OVERFLOW))
def test_activations_above_float16_range_overflow_to_inf(case):
    """Given:  a float32 model whose second row's activations pass 65,504, then a reduction
       Result: float32 precision = jax.jit's numbers; float16 precision: inf where JAX's value
               (or an activation before it) passes 65,504, float16-accurate elsewhere"""
    fn, make = OVERFLOW[case]
    args = make()
    want = np.asarray(jax.jit(fn)(*args))
    got32, got16 = run(fn, args, "float32"), run(fn, args, "float16")
    np.testing.assert_allclose(got32, want, rtol=1e-6)
    assert got16.dtype == np.float32 == want.dtype          # the model's I/O dtype is kept
    assert np.isinf(got16[1]).all() and np.isfinite(want[1]).all() and (want[1] > F16_MAX).all()
    assert np.isfinite(got16[0]).all()
    np.testing.assert_allclose(got16[0], want[0], rtol=1e-2)


# ---- a small CNN: float16 accuracy, and really rounded ----

DN = ("NCHW", "OIHW", "NCHW")


def _cnn(p, x):
    y = lax.conv_general_dilated(x, p["w1"], (1, 1), "SAME", dimension_numbers=DN)
    y = jax.nn.relu(y + p["b1"][None, :, None, None])
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    y = lax.conv_general_dilated(y, p["w2"], (1, 1), "SAME", dimension_numbers=DN)
    y = jax.nn.relu(y + p["b2"][None, :, None, None])
    y = lax.reduce_window(y, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4
    return y.reshape(y.shape[0], -1) @ p["w3"] + p["b3"]


def cnn_args():
    r = np.random.RandomState(1)

    def init(shape, fan_in):
        return (r.randn(*shape) / np.sqrt(fan_in)).astype(np.float32)
    params = {"w1": init((8, 3, 3, 3), 27), "b1": init((8,), 8), "w2": init((8, 8, 3, 3), 72),
              "b2": init((8,), 8), "w3": init((128, 10), 128), "b3": init((10,), 10)}
    return [params, r.randn(4, 3, 16, 16).astype(np.float32)]


def test_small_cnn_in_float16_is_float16_accurate_and_rounded():
    """Given:  conv + relu + max pool + conv + relu + average pool + dense, float32 arguments
       Result: float32 precision matches JAX to float32 accuracy; float16 precision is within
               rtol 1e-2 plus atol 1e-2 * max|result| of JAX's float32 result (float16 rounds
               to 2**-11 ~ 4.9e-4 relative per op: eight rounded layers, sums over up to 72
               products, stay well inside ~20 float16 ulps at the output's scale), returns
               float32 arrays holding float16 values, and is not the float32 result"""
    args = cnn_args()
    want = np.asarray(jax.jit(_cnn)(*args))
    got32, got16 = run(_cnn, args, "float32"), run(_cnn, args, "float16")
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got16, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    assert got16.dtype == np.float32
    np.testing.assert_array_equal(got16, got16.astype(np.float16))  # the last op's rounding
    assert not np.array_equal(got16, got32)
    assert np.abs(got16 - want).max() > 10 * np.abs(got32 - want).max()


# ---- the mode: read off the saved program ----

def test_runtime_names_the_mode():
    """Given:  the CNN at both precisions, and float16 JAX code at float32 precision
       Result: Compiled.runtime is "mil-reference" (or "coreml") for float32 compute and
               "mil-reference-float16" ("coreml-float16") for both float16 programs; the mode is
               the saved program's (computes_in_float16), not the option's"""
    args = cnn_args()
    c32, c16 = compiled(_cnn, args, "float32"), compiled(_cnn, args, "float16")
    assert c32.runtime == BASE
    assert c16.runtime == BASE + "-float16"
    assert not computes_in_float16(ct.utils.load_spec(c32.executable.package_path))
    assert computes_in_float16(ct.utils.load_spec(c16.executable.package_path))
    x16 = np.linspace(-1, 1, 6).astype(np.float16)
    assert compiled(jnp.sin, [x16], "float32").runtime == BASE + "-float16"


def test_float16_program_is_typed_float16_op_by_op():
    """Given:  the CNN with compute_precision="float16"
       Result: the saved program takes and returns float32, and every op between the input
               casts and the output casts has a float16 result (coremltools' pass)"""
    from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
    from coremltools.converters.mil.mil import types
    c = compiled(_cnn, cnn_args(), "float16")
    spec = ct.utils.load_spec(c.executable.package_path)
    io = [f.type.multiArrayType.dataType for f in (*spec.description.input,
                                                   *spec.description.output)]
    assert set(io) == {ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32}
    ops = MilReferenceExecutor(c.executable.package_path).ops
    computed = [op for op in ops if op.op_type not in ("const", "cast")]
    floats = {types.builtin_to_string(o.dtype) for op in computed for o in op.outputs
              if types.is_float(o.dtype)}
    assert {op.op_type for op in computed} >= {"conv", "max_pool", "matmul", "add", "maximum"}
    assert floats == {"fp16"}


# ---- one rounding per op, and the ops coremltools keeps in float32 ----

def test_an_op_rounds_its_result_not_its_internal_steps():
    """Given:  layer_norm of activations +-300 (their squared deviations, 9e4, pass 65,504) and
               silu(-12) (its exp(12) = 1.6e5 does too), at float16 precision
       Result: float16-accurate results: each op computes from its float16 operands in float32
               and rounds once (rounding every internal step gave zeros and -0.0)"""
    x = np.array([[300.0, -300.0, 310.0, -290.0]], np.float32)
    ln = lambda x: rnn.layer_norm(x, jnp.ones(4), jnp.zeros(4))   # noqa: E731
    np.testing.assert_allclose(run(ln, [x], "float16"), jax.jit(ln)(x), rtol=2e-3)
    s = np.array([-12.0, -1.0, 3.0], np.float32)
    got = run(rnn.silu, [s], "float16")
    np.testing.assert_allclose(got, jax.jit(jax.nn.silu)(s), rtol=2e-3)
    assert got[0] < 0


def test_float_to_int_saturates_after_a_float16_overflow():
    """Given:  (x * 1e3).astype(int32) at float16 precision, x * 1e3 = 1e5 overflowing to inf
       Result: int32's maximum, as JAX computing in float16 gives: the multiply is float16, and
               the clamp to int32's range stays float32 in the program (its bounds are no
               float16) and in the executor, so inf saturates instead of casting garbage"""
    fn = lambda x: (x * 1e3).astype(jnp.int32)                       # noqa: E731
    x = np.array([1.5, 30.0, 100.0, -100.0], np.float32)
    want16 = jax.jit(lambda x: (x.astype(jnp.float16) * jnp.float16(1e3)).astype(jnp.int32))(x)
    np.testing.assert_array_equal(run(fn, [x], "float16"), want16)
    np.testing.assert_array_equal(run(fn, [x], "float32"), jax.jit(fn)(x))
    assert want16[2] == np.iinfo(np.int32).max
