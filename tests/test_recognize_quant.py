"""Quantized linear layers recognised as DequantMatMul (passes/pattern_quant.py): int8 per output
channel and int4 packed two nibbles per byte with a scale and zero per group of rows, the
weights as arguments and as closed-over constants; exact op counts, near misses left alone,
MLX running quantized_matmul, Core ML's constexpr_blockwise_shift_scale (iOS18), results equal
jax.jit's within the de-quantization's rounding on every backend."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.coreml.executor.ops import OVERRIDES
from rlx_jax.passes.recognize import recognize

R = np.random.RandomState(0)
K, N = 128, 48
X = R.randn(2, 5, K).astype(np.float32)
Q8 = R.randint(-128, 128, (K, N)).astype(np.int8)
S8 = R.uniform(0.002, 0.02, N).astype(np.float32)
Q4 = R.randint(0, 256, (K // 2, N)).astype(np.uint8)


def groups(g):
    """scale, zero [K/G, N] of int4 groups of g rows."""
    r = np.random.RandomState(g)
    return (r.uniform(0.01, 0.05, (K // g, N)).astype(np.float32),
            r.uniform(0.0, 15.0, (K // g, N)).astype(np.float32))


def int8_linear(x, q, scale):
    return x @ (q.astype(x.dtype) * scale)


def int4_linear(x, q, scale, zero, shift=4, low_first=True):
    """Two nibbles per byte along K, the low one first; (w - zero) * scale per group."""
    k2, n = q.shape
    g = 2 * k2 // scale.shape[0]
    lo, hi = q & 0xF, q >> shift
    w = jnp.stack([lo, hi] if low_first else [hi, lo], axis=1).reshape(2 * k2, n)
    w = w.astype(x.dtype).reshape(-1, g, n)
    return x @ ((w - zero[:, None, :]) * scale[:, None, :]).reshape(2 * k2, n)


def int4_u32_linear(x, q, scale, zero, mask=0xF):
    """Eight nibbles per uint32 word along K, the lowest first."""
    k8, n = q.shape
    g = 8 * k8 // scale.shape[0]
    shifts = jnp.arange(8, dtype=jnp.uint32) * 4
    w = ((q[:, None, :] >> shifts[None, :, None]) & mask).reshape(8 * k8, n).astype(x.dtype)
    return x @ ((w.reshape(-1, g, n) - zero[:, None, :]) * scale[:, None, :]).reshape(8 * k8, n)


WORDS = np.ascontiguousarray(Q4.reshape(K // 8, 4, N).transpose(0, 2, 1)).view("<u4")[..., 0]


def grad_x(fn):
    """jax.grad w.r.t. x of a loss through the layer."""
    return jax.grad(lambda x, *weights: jnp.sum(jnp.tanh(fn(x, *weights)) ** 2))


PRIMS_INT4 = {"Binary": 4, "Cast": 1, "Concat": 1, "DotGeneral": 1, "Expand": 2, "Reshape": 5}
PRIMS_U32 = {"Binary": 5, "Cast": 1, "DotGeneral": 1, "Expand": 4, "Iota": 1, "Reshape": 3}
GRAD = {"Activation": 1, "Binary": 6, "DequantMatMul": 2, "Expand": 1}   # forward, x @ wᵀ
FORMS = {      # form -> (function, arguments, the op counts recognition leaves)
    "int8": (int8_linear, (X, Q8, S8), {"DequantMatMul": 1}),
    "int8_scale_first": (lambda x, q, s: x @ (s * q.astype(jnp.float32)), (X, Q8, S8),
                         {"DequantMatMul": 1}),
    "int8_rank2": (int8_linear, (X[0], Q8, S8), {"DequantMatMul": 1}),
    "int4_g32": (int4_linear, (X, Q4, *groups(32)), {"DequantMatMul": 1}),
    "int4_g64": (int4_linear, (X, Q4, *groups(64)), {"DequantMatMul": 1}),
    "int4_g128": (int4_linear, (X[0], Q4, *groups(128)), {"DequantMatMul": 1}),
    "int8_grad": (grad_x(int8_linear), (X, Q8, S8), GRAD),
    "int4_grad": (grad_x(int4_linear), (X, Q4, *groups(64)), GRAD),
    "int4_u32": (int4_u32_linear, (X, WORDS, *groups(32)), {"DequantMatMul": 1}),
    "int4_u32_grad": (grad_x(int4_u32_linear), (X, WORDS, *groups(32)), GRAD),
    # near misses: a scale per input row, an unsigned int8 weight, another shift, the nibbles
    # high first, a group size MLX has no kernel for (16)
    "int8_scale_on_k": (lambda x, q, s: x @ (q.astype(x.dtype) * s[:, None]),
                        (X, Q8, R.rand(K).astype(np.float32)),
                        {"Binary": 1, "Cast": 1, "DotGeneral": 1, "Expand": 1}),
    "uint8_weight": (int8_linear, (X, Q8.view(np.uint8), S8),
                     {"Binary": 1, "Cast": 1, "DotGeneral": 1, "Expand": 1}),
    "int4_shift3": (lambda x, q, s, z: int4_linear(x, q, s, z, shift=3), (X, Q4, *groups(32)),
                    PRIMS_INT4),
    "int4_high_first": (lambda x, q, s, z: int4_linear(x, q, s, z, low_first=False),
                        (X, Q4, *groups(32)), PRIMS_INT4),
    "int4_g16": (int4_linear, (X, Q4, *groups(16)), PRIMS_INT4),
    "int4_u32_mask7": (lambda x, q, s, z: int4_u32_linear(x, q, s, z, mask=7),
                       (X, WORDS, *groups(32)), PRIMS_U32),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_and_near_misses(form):
    fn, args, want = FORMS[form]
    assert recognize(rlx_jax.trace(fn, *args)).op_counts() == want


def _closed(form):
    """The form with its weights closed over (Constants of the program): a function of x."""
    fn, (x, *weights), _ = FORMS[form]
    weights = [jnp.asarray(w) for w in weights]
    return (lambda x: fn(x, *weights)), (x,)


CALLS = {f"{form}_{how}": (form, how) for form in ("int8", "int4_g32", "int4_g64")
         for how in ("arguments", "constants")}


def _call(name):
    form, how = CALLS[name]
    if how == "constants":
        return _closed(form)
    fn, args, _ = FORMS[form]
    return fn, args


@pytest.mark.parametrize("name", sorted(CALLS))
def test_equals_jax(name, backend):
    """One DequantMatMul on mlx and coreml (xla decomposes it); results equal jax.jit's up to
    the de-quantization's rounding (MLX computes scale·q + bias, not scale·(q − zero)) and the
    matmul's summation order."""
    fn, args = _call(name)
    jf = rlx_jax.jit(fn, backend=backend)
    counts = jf.lower(*args).op_counts()
    if backend == "xla":
        assert "DequantMatMul" not in counts and counts["DotGeneral"] == 1
    else:
        assert counts == {"DequantMatMul": 1}
    np.testing.assert_allclose(np.asarray(jf(*args)), jax.jit(fn)(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_mlx_runs_quantized_matmul(name):
    """The MLX program calls quantized_matmul; constant weights are packed at lowering time
    (the program is that one op); the program traced on placeholders packs argument weights in
    it (a transpose of the bytes and of the scales, no float weight), which the executable
    does before the call instead (the test below)."""
    fn, args = _call(name)
    counts = rlx_jax.jit(fn, backend="mlx").lower(*args).op_counts("backend")
    assert counts.get("QuantizedMatmul") == 1 and "Matmul" not in counts
    if name.endswith("constants"):
        assert counts == {"QuantizedMatmul": 1}
    plain = rlx_jax.jit(fn, backend="mlx", recognize=False).lower(*args).op_counts("backend")
    assert "QuantizedMatmul" not in plain and plain["Matmul"] == 1


def test_mlx_int8_with_no_group_size_runs_the_formula():
    """K = 40: no MLX group size (32, 64, 128) divides it; the formula runs (mx ops)."""
    x, q = X[..., :40], Q8[:40]
    jf = rlx_jax.jit(int8_linear, backend="mlx")
    assert jf.lower(x, q, S8).op_counts() == {"DequantMatMul": 1}
    assert "QuantizedMatmul" not in jf.lower(x, q, S8).op_counts("backend")
    np.testing.assert_allclose(np.asarray(jf(x, q, S8)), int8_linear(x, q, S8), rtol=1e-5,
                               atol=1e-5)


COREML_IOS18 = {"constexpr_blockwise_shift_scale": 1, "matmul": 1}
COREML_IOS16 = {"constexpr_affine_dequantize": 1, "matmul": 1}      # int8 only
COREML_COMPOSED = {
    "int8": {"cast": 1, "matmul": 1, "mul": 1},
    "int4_g32": {"cast": 1, "expand_dims": 2, "floor_div": 1, "matmul": 1, "mul": 2,
                 "reshape": 3, "stack": 1, "sub": 2},
}


@pytest.mark.parametrize("form", sorted(COREML_COMPOSED))
@pytest.mark.parametrize("target", ["iOS16", "iOS18"])
def test_coreml_programs(form, target):
    """Constant weights: one constexpr_blockwise_shift_scale and a matmul where the target is
    iOS18 or later, else (int8) constexpr_affine_dequantize or (int4) the composition, as for
    argument weights on every target; results
    equal jax.jit's (the constexpr's output is the formula's weight, operation for
    operation)."""
    for fn, args, constant in (_closed(form) + (True,), FORMS[form][:2] + (False,)):
        jf = rlx_jax.jit(fn, backend="coreml", minimum_deployment_target=target)
        low = jf.lower(*args)
        assert low.op_counts() == {"DequantMatMul": 1}
        want = COREML_IOS18 if constant and target == "iOS18" else COREML_IOS16 if (
            constant and form == "int8") else COREML_COMPOSED[form]
        assert low.op_counts("backend") == want
        np.testing.assert_allclose(np.asarray(jf(*args)), jax.jit(fn)(*args), rtol=1e-4,
                                   atol=1e-4)


def test_executor_blockwise_shift_scale_is_the_spec():
    """out = scale · (data − offset) per block (coremltools' decompression, op for op), and a
    data / scale shape that is not blocks is refused."""
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import \
        constexpr_blockwise_shift_scale as op
    data = R.randint(0, 16, (8, 6)).astype(np.uint8)
    scale, offset = R.rand(2, 3).astype(np.float32), R.rand(2, 3).astype(np.float32) * 15
    got = OVERRIDES["constexpr_blockwise_shift_scale"](data=data, scale=scale, offset=offset)
    np.testing.assert_array_equal(got, op.decompress(data, scale, offset))
    got = OVERRIDES["constexpr_blockwise_shift_scale"](data=data.astype(np.int8),
                                                       scale=scale[:1].astype(np.float16))
    np.testing.assert_array_equal(got, op.decompress(data.astype(np.int8),
                                                     scale[:1].astype(np.float16), None))
    with pytest.raises(rlx_jax.errors.LoweringError, match="not blocks"):
        OVERRIDES["constexpr_blockwise_shift_scale"](data=data, scale=R.rand(3, 6))


def test_executor_affine_dequantize_is_the_spec():
    """out = scale · (data − zero_point) along the axis (coremltools' decompression), scalars
    broadcast; a parameter of another size is refused."""
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import \
        constexpr_affine_dequantize as op
    data, scale = Q8[:6, :5], R.rand(5).astype(np.float32)
    for zero in (np.int8(0), R.randint(-3, 3, 5).astype(np.int8)):
        got = OVERRIDES["constexpr_affine_dequantize"](quantized_data=data, zero_point=zero,
                                                       scale=scale, axis=1)
        np.testing.assert_array_equal(got, op.decompress(data, zero, scale, 1))
    with pytest.raises(rlx_jax.errors.LoweringError, match="along axis"):
        OVERRIDES["constexpr_affine_dequantize"](quantized_data=data, zero_point=np.int8(0),
                                                 scale=scale, axis=0)


def test_executor_interleaved_concat():
    """concat(interleave=True), which coremltools writes for a stack + reshape: the inputs
    alternate along the axis."""
    a, b = np.arange(6).reshape(3, 2), -np.arange(6).reshape(3, 2)
    got = OVERRIDES["concat"](values=[a, b], axis=0, interleave=True)
    np.testing.assert_array_equal(got, np.stack([a, b], axis=1).reshape(6, 2))
    np.testing.assert_array_equal(OVERRIDES["concat"](values=[a, b], axis=1),
                                  np.concatenate([a, b], 1))


def test_mlx_packs_argument_weights_once_per_buffer():
    """Weights passed as jax.Arrays are packed into MLX's layout at the first call and reused
    while they live (the cache is keyed by their identity); other weights get entries of their
    own; numpy weights (mutable) are packed at every call."""
    import gc
    fn, (x, *weights), _ = FORMS["int4_g32"]
    q, s, z = map(jnp.asarray, weights)
    compiled = rlx_jax.jit(fn, backend="mlx").lower(x, q, s, z).compile()
    cache = compiled.executable.cache
    first = compiled(x, q, s, z)
    packed = list(cache.values())[0][1]
    np.testing.assert_array_equal(compiled(x, q, s, z), first)
    assert len(cache) == 1 and list(cache.values())[0][1] is packed
    other = q ^ 0x11
    np.testing.assert_allclose(np.asarray(compiled(x, other, s, z)), fn(x, other, s, z),
                               rtol=1e-4, atol=1e-4)
    assert len(cache) == 2
    del other
    gc.collect()
    assert len(cache) == 1
    np.testing.assert_array_equal(compiled(x, *weights), first)
    assert len(cache) == 1


@pytest.mark.parametrize("form", ["int8", "int4_g32"])
def test_gradient_wrt_x(form, backend):
    """jax.grad w.r.t. x: the forward and the gradient (x @ wᵀ, a transposed DequantMatMul)
    are one node each on mlx and coreml; equal jax.grad's, and with the weights closed over
    float32 central differences (rlx_jax.testing.check_grads)."""
    fn, (x, *weights), _ = FORMS[form]
    g = grad_x(fn)
    jf = rlx_jax.jit(g, backend=backend)
    assert jf.lower(x, *weights).op_counts().get("DequantMatMul") == (
        None if backend == "xla" else 2)
    np.testing.assert_allclose(np.asarray(jf(x, *weights)), jax.jit(g)(x, *weights),
                               rtol=1e-4, atol=1e-5)
    consts = [jnp.asarray(w) for w in weights]
    rlx_jax.testing.check_grads(lambda x: jnp.sum(jnp.tanh(fn(x, *consts)) ** 2), (x[:1, :2],),
                                backend=backend)


@pytest.mark.host("a uint32 weight passed as an argument: Core ML computes integers in int32 "
                  "only, its DequantMatMul runs on the host", backends=("coreml",))
def test_int4_u32_words(backend):
    """int4 eight per uint32: equal to jax.jit with the words as arguments (MLX: re-packed as
    they are, qᵀ; Core ML: the node on the host) and as constants (recognised as the same
    nibbles in bytes, int4_u8: MLX one quantized_matmul, Core ML iOS18 its constexpr)."""
    fn, args, _ = FORMS["int4_u32"]
    options = {"minimum_deployment_target": "iOS18"} if backend == "coreml" else {}
    for f, a, packing in ((fn, args, "int4_u32"), _closed("int4_u32") + ("int4_u8",)):
        jf = rlx_jax.jit(f, backend=backend, **options)
        low = jf.lower(*a)
        if backend != "xla":
            assert low.op_counts() == {"DequantMatMul": 1}
            assert f"packing={packing}" in low.as_text()
        if backend == "mlx":
            assert low.op_counts("backend")["QuantizedMatmul"] == 1
        if backend == "coreml":
            hosted = [n.kind.name for n, _ in low.placement().host_ops()]
            assert hosted == (["DequantMatMul"] if packing == "int4_u32" else [])
            if packing == "int4_u8":
                assert low.op_counts("backend") == COREML_IOS18
        np.testing.assert_allclose(np.asarray(jf(*a)), jax.jit(f)(*a), rtol=1e-4, atol=1e-4)
