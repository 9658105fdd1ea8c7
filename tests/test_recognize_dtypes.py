"""16-bit programs recognised as float32 ones are (templates generated per float dtype,
passes/patterns.py VARIANTS): softmax, log_softmax, gelu, silu, flax LayerNorm and RMSNorm,
jax.nn and flax attention in bfloat16 and float16, and the flax layers with float32 parameters
(dtype=bf16 / f16, param_dtype=float32); forward and jax.grad, exact op counts; near misses left
alone; numbers equal jax.jit on every backend, each form alone and a 16-bit flax transformer
block holding them all.

A formula that JAX computes partly in float32 (a 16-bit sum accumulates in float32) becomes its
kind at float32 between Casts: operands cast up, the result cast back to the formula's dtype;
one computed wholly in 16 bits (gelu, silu) becomes its kind at that dtype. Tolerances against
jax.jit, relative to the largest |value| of each result: bfloat16 3/128 (3 ulp of bfloat16's 8
bits: the formula rounds its intermediates to 16 bits, the kind does not), float16 3/1024; a
gradient, reduced through the 16-bit intermediates of its program, twice those, against the
same program at float32 (JAX's own 16-bit gradient is the less accurate of the two)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.passes.pattern_refs import R
from rlx_jax.passes.patterns import BF16, F16, F32
from rlx_jax.passes.recognize import recognize

from . import where_ran

nn = pytest.importorskip("flax.linen")
BACKENDS = [b for b in ("xla", "mlx", "coreml") if b in rlx_jax.available_backends()]
DTYPES = {"bf16": (BF16, BF16), "f16": (F16, F16), "bf16/f32": (BF16, F32),
          "f16/f32": (F16, F32), "f32": (F32, F32)}         # (activations, parameters)
TOL = {BF16: 3 / 128, F16: 3 / 1024}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 8)).astype(np.float32) * 2
Q = RNG.normal(size=(2, 5, 2, 4)).astype(np.float32)
KEY = jax.random.PRNGKey(0)


def _flax(module):
    """(fn(params, x), params at the variant's dtypes) of a flax layer."""
    def make(act, par):
        m = module(dtype=act, param_dtype=par)
        return (lambda p, x: m.apply(p, x)), m.init(KEY, jnp.asarray(X, act))
    return make


def _plain(fn):
    return lambda act, par: ((lambda p, x: fn(x)), {})


def _attention(fn):
    """q is x; k and v are the "parameters", at the activations' dtype."""
    kv = {"k": Q[:, ::-1] * 0.5, "v": Q[:, :, ::-1]}
    return lambda act, par: ((lambda p, x: fn(x, p["k"], p["v"])), jax.tree.map(
        lambda a: jnp.asarray(a, act), kv))


# form -> (maker(act, par) -> (fn(params, x), params), x, the forward's kind, its Casts in 16
# bits with 16-bit / float32 parameters (its 16-bit float operands cast up, its result down),
# the kinds the gradient holds)
FORMS = {
    "softmax": (_plain(jax.nn.softmax), X, "Softmax", (2,), {"Softmax"}),
    "log_softmax": (_plain(jax.nn.log_softmax), X, "LogSoftmax", (2,), {"LogSoftmax"}),
    "gelu": (_plain(jax.nn.gelu), X, "Activation", (0,), {"ActivationBackward"}),
    "silu": (_plain(jax.nn.silu), X, "Activation", (0,), {"ActivationBackward"}),
    "layer_norm": (_flax(nn.LayerNorm), X, "LayerNorm", (4, 2),
                   {"LayerNormBackwardInput", "LayerNormBackwardGamma"}),
    "rms_norm": (_flax(nn.RMSNorm), X, "RmsNorm", (3, 2),
                 {"RmsNormBackwardInput", "RmsNormBackwardGamma"}),
    "jax_attention": (_attention(jax.nn.dot_product_attention), Q, "Attention", (4,),
                      {"AttentionBackward"}),
    "flax_attention": (_attention(nn.dot_product_attention), Q, "Attention", (4,),
                       {"AttentionBackward"}),
}
MIXED = ("layer_norm", "rms_norm")
CASES = [(f, d) for f in FORMS for d in DTYPES if d != "f32" and ("/" not in d or f in MIXED)]


def _counts(form, dtype):
    """The forward's exact op counts at `dtype`."""
    casts = FORMS[form][3]["/" in dtype] if dtype else 0
    return {FORMS[form][2]: 1, **({"Cast": casts} if casts else {})}


def _program(form, dtype, grad=False):
    """(fn, args) of `form` at `dtype`: the forward, or jax.grad of a weighted sum of it."""
    act, par = DTYPES[dtype]
    make, x = FORMS[form][:2]
    fn, params = make(act, par)
    args = (params, jnp.asarray(x, act))
    if not grad:
        return fn, args
    cot = jnp.asarray(RNG.uniform(0.5, 1.5, x.shape), F32)
    return jax.grad(lambda p, x: jnp.vdot(fn(p, x).astype(F32), cot), argnums=(0, 1)), args


def _no_casts(counts):
    return {k: n for k, n in counts.items() if k != "Cast"}


def test_every_form_is_recognised_at_every_16_bit_dtype():
    """Exact op counts of the recognised forward; the gradient holds the backward kinds, and
    its op counts but the Casts are those of the same program in float32."""
    for form, dtype in CASES:
        fn, args = _program(form, dtype)
        assert recognize(rlx_jax.trace(fn, *args)).op_counts() == _counts(form, dtype), (
            form, dtype)
        fn, args = _program(form, dtype, grad=True)
        counts = recognize(rlx_jax.trace(fn, *args)).op_counts()
        assert FORMS[form][4] <= set(counts), (form, dtype, counts)
        fn, args = _program(form, "f32", grad=True)
        assert _no_casts(counts) == recognize(rlx_jax.trace(fn, *args)).op_counts(), (
            form, dtype)


def test_float32_is_unchanged():
    for form in FORMS:
        fn, args = _program(form, "f32")
        counts = recognize(rlx_jax.trace(fn, *args)).op_counts()
        assert counts == _counts(form, None), form


def test_the_kind_computes_where_the_formula_does():
    """bf16 softmax: its sum is float32, so Softmax runs at float32 between two Casts; bf16
    gelu is bfloat16 throughout, so its Activation is bfloat16."""
    fn, args = _program("softmax", "bf16")
    g = recognize(rlx_jax.trace(fn, *args))
    (node,) = [n for n in g.nodes if n.kind.name == "Softmax"]
    assert node.inputs[0].dtype == F32 and node.inputs[0].node.kind.name == "Cast"
    assert g.outputs[0].dtype == BF16 and g.outputs[0].node.kind.name == "Cast"
    fn, args = _program("gelu", "bf16")
    (node,) = recognize(rlx_jax.trace(fn, *args)).nodes[1:]
    assert node.attrs["fn"] == "gelu_tanh" and node.out.dtype == BF16


def test_templates_are_keyed_by_dtype():
    """The template of each variant holds its dtypes (so the pattern index and the on-disk
    cache, keyed by the input types, keep them apart); mixed ones only for layers."""
    ln = R["ln"]
    assert ln.variants() == ((F32, F32), (BF16, BF16), (F16, F16), (BF16, F32), (F16, F32))
    assert R["softmax"].variants() == ((F32, F32), (BF16, BF16), (F16, F16))
    ins = [n.out.dtype for n in ln.template(2, (BF16, F32)).nodes if n.kind.name == "Input"]
    assert ins == [BF16, F32, F32]


NEAR_MISSES = {   # 16-bit formulas that differ slightly from the libraries'
    "softmax without the max": lambda x: jnp.exp(x) / jnp.sum(jnp.exp(x), -1, keepdims=True),
    "softmax summed in bf16": lambda x: jnp.exp(x - x.max(-1, keepdims=True)) / jnp.sum(
        jnp.exp(x - x.max(-1, keepdims=True)), -1, keepdims=True, dtype=BF16),
    "rms with eps outside": lambda x: x / (jnp.sqrt(jnp.mean(
        x.astype(F32) ** 2, -1, keepdims=True)) + 1e-6).astype(BF16),
    "gelu's tanh in float32": lambda x: (0.5 * x * (1 + jnp.tanh(
        0.7978846 * (x + 0.044715 * x ** 3)).astype(F32))).astype(BF16),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_are_left_alone(name):
    traced = rlx_jax.trace(NEAR_MISSES[name], jnp.asarray(X, BF16))
    assert recognize(traced).op_counts() == traced.op_counts()


def _close(got, want, tol):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(np.abs(b).max(), 1e-3))


class Block(nn.Module):
    """A pre-norm transformer block in 16 bits with float32 parameters (flax's defaults)."""
    dtype: type

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(dtype=self.dtype)(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=2, dtype=self.dtype,
                                                use_bias=False)(h, h)
        h = nn.Dense(16, dtype=self.dtype)(jax.nn.gelu(nn.RMSNorm(dtype=self.dtype)(x)))
        return jax.nn.log_softmax(x + nn.Dense(8, dtype=self.dtype)(h))


BLOCK_KINDS = {"LayerNorm", "Attention", "RmsNorm", "LogSoftmax", "AttentionBackward",
               "LayerNormBackwardInput", "LayerNormBackwardGamma", "RmsNormBackwardInput",
               "RmsNormBackwardGamma"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["bf16/f32", pytest.param("f16/f32", marks=pytest.mark.extended)])
def test_transformer_block_forward_and_grad_equal_jax(dtype, backend):
    """Every kind of a 16-bit flax block at once: its forward and jax.grad (parameters and
    input) recognised as in float32 and equal to jax.jit's."""
    act = DTYPES[dtype][0]
    m, x = Block(act), jnp.asarray(X, act)
    p = m.init(KEY, x)
    cot = jnp.asarray(RNG.uniform(0.5, 1.5, X.shape), F32)
    grad = jax.grad(lambda p, x: jnp.vdot(m.apply(p, x).astype(F32), cot), argnums=(0, 1))
    counts = recognize(rlx_jax.trace(grad, p, x)).op_counts()
    assert BLOCK_KINDS <= set(counts), counts
    _run(lambda p, x: m.apply(p, x), (p, x), backend, TOL[act], (p, x))
    _run(grad, (p, x), backend, 2 * TOL[act], (p, x))


# jax.nn's attention asks dot_general for float16 x float16 -> float32, which XLA's CPU
# backend lacks: jax.jit runs it at float32 inputs, and backend "xla" cannot run it
XLA_CPU_LACKS = {("jax_attention", "f16")}


def _run(fn, args, backend, tol, ref_args):
    if backend == "coreml" and any(jnp.dtype(a.dtype) == BF16 for a in jax.tree.leaves(args)):
        where_ran.expect_host("Core ML has no bfloat16 tensors: the casts from and to "
                              "bfloat16 run on the host")
    jf = rlx_jax.jit(fn, backend=backend)
    _close(jf(*args), jax.jit(fn)(*ref_args), tol)
    return jf.lower(*args).op_counts()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [f"{f}:{d}" for f, d in CASES])
def test_numbers_equal_jax(case, backend):
    form, dtype = case.split(":")
    tol = TOL[DTYPES[dtype][0]]
    cpu_lacks = (form, dtype) in XLA_CPU_LACKS
    if cpu_lacks and backend == "xla":
        pytest.skip("XLA's CPU backend has no float16 x float16 -> float32 dot_general")
    for grad in (False, True):
        fn, args = _program(form, dtype, grad)
        # a gradient against the same program at float32: JAX's own 16-bit gradient rounds
        # every step, and softmax's y * (dy - sum(dy * y)) cancels in float16 (measured: 9
        # float16 ulp of the largest value off the float32 result, where the kind is 1-2)
        upcast = cpu_lacks or grad
        ref = jax.tree.map(lambda a: jnp.asarray(a, F32), args) if upcast else args
        counts = _run(fn, args, backend, tol * (1 + grad), ref)
        if backend == "mlx" and not grad:
            assert counts == _counts(form, dtype)


rnn = rlx_jax.nn
KINDS = {    # the kinds at 16-bit operands, as rlx_jax.nn emits them: the MLX and MIL rules
    "Softmax": lambda x, g: rnn.softmax(x),
    "LogSoftmax": lambda x, g: rnn.log_softmax(x),
    "LayerNorm": lambda x, g: rnn.layer_norm(x, g, g, eps=1e-5),
    "RmsNorm": lambda x, g: rnn.rms_norm(x, g, eps=1e-6),
    "Activation": lambda x, g: rnn.gelu(x, approximate=True),
    "Attention": lambda q, k, v: rnn.attention(q, k, v, layout="BSHD"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kinds_at_16_bits_equal_float32_within_tolerance(kind, dtype, backend):
    """Each kind claimed at bfloat16 / float16 operands (Core ML: float16; its bfloat16
    values are placed on the host) equals the float32 result within the dtype's tolerance."""
    act = DTYPES[dtype][0]
    fn = KINDS[kind]
    ins = (Q, Q[:, ::-1], Q[:, :, ::-1] * 2) if kind == "Attention" else (
        X, RNG.uniform(0.5, 1.5, 8))
    args = [jnp.asarray(a, act) for a in ins]
    if backend == "coreml" and act == BF16:
        where_ran.expect_host("Core ML has no bfloat16 tensors: bfloat16 ops run on the host")
    jf = rlx_jax.jit(fn, backend=backend)
    if backend == "mlx":
        assert jf.lower(*args).op_counts() == {kind: 1}
    want = jax.jit(fn)(*[jnp.asarray(a, F32) for a in args])
    _close(jnp.asarray(jf(*args), F32), want, TOL[act])
