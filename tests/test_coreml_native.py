"""Native Core ML (MIL) kernels of the high-level and backward kinds.

Each kernel runs on the coreml backend (Core ML on macOS, the MIL reference executor elsewhere)
against the kind's reference semantics (JAX) and against its decomposition on the xla backend;
jax.grad programs written with rlx_jax.nn against jax.grad and against native_backward=False on
coreml; and the structural properties of the kernels as MIL op counts (built, not run).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.errors import LoweringError
from rlx_jax import nn
from rlx_jax.backends.base import all_backends, kept_kinds
from rlx_jax.ir.graph import Builder
from rlx_jax.ir.ops import BACKWARD, CONTROL, PRIMITIVE, OpKind as K
from rlx_jax.ir.reference import evaluate
from rlx_jax.passes.legalize import legalize

from .conftest import BACKENDS
from .nn_cases import (ATT, CONV, KV, POOL, Q, V, KIND_CASES, kind_case, f,
                       single_node_graph)

pytestmark = pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is not installed")
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


@pytest.fixture(autouse=True, scope="module")
def fresh_package_cache(tmp_path_factory):
    """Packages are cached by graph hash; a fresh cache makes every kernel here be rebuilt."""
    old = os.environ.get("RLX_JAX_CACHE_DIR")
    os.environ["RLX_JAX_CACHE_DIR"] = str(tmp_path_factory.mktemp("coreml-native"))
    yield
    if old is None:
        os.environ.pop("RLX_JAX_CACHE_DIR", None)
    else:
        os.environ["RLX_JAX_CACHE_DIR"] = old


def coreml():
    return all_backends()["coreml"]


def kernel_ops(counts):
    """MIL ops of a single-kernel program (its last op is the output: no identity)."""
    return sum(counts.values())


# ---- cases beyond the shared ones: layouts, ties, strides, groups, padding ----
def conv(**kw):
    return dict(CONV, **kw)


NCHW = ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
EXTRA = [
    kind_case("maxpool_bwd_ties", K.MaxPool2dBackward,
             (lambda r: r.randint(0, 2, (1, 4, 6, 2)).astype(np.float32), f(1, 2, 3, 2)), POOL),
    kind_case("maxpool_bwd_nchw_3x3", K.MaxPool2dBackward, (f(2, 3, 6, 9), f(2, 3, 2, 3)),
             dict(window_dimensions=(1, 1, 3, 3), window_strides=(1, 1, 3, 3),
                  padding=((0, 0),) * 4)),
    kind_case("conv_bwd_input_same_groups", K.Conv2dBackwardInput, (f(2, 5, 5, 4), f(3, 3, 2, 4)),
             conv(window_strides=(1, 1), feature_group_count=2, input_shape=(2, 5, 5, 4))),
    kind_case("conv_bwd_input_nchw_uneven", K.Conv2dBackwardInput, (f(1, 4, 4, 5), f(4, 2, 3, 3)),
             conv(padding=((0, 0), (2, 1)), dimension_numbers=NCHW, input_shape=(1, 2, 9, 8))),
    kind_case("conv_bwd_input_negative_pad", K.Conv2dBackwardInput, (f(1, 3, 4, 2), f(2, 2, 3, 2)),
             conv(window_strides=(1, 1), padding=((-1, 0), (0, -2)), input_shape=(1, 5, 7, 3))),
    kind_case("conv_bwd_weight_same_groups", K.Conv2dBackwardWeight,
             (f(2, 5, 5, 4), f(2, 5, 5, 4)),
             conv(window_strides=(1, 1), feature_group_count=2, weight_shape=(3, 3, 2, 4))),
    kind_case("conv_bwd_weight_dilated", K.Conv2dBackwardWeight, (f(1, 7, 7, 2), f(1, 5, 3, 3)),
             conv(window_strides=(1, 1), padding=((1, 1), (0, 0)), rhs_dilation=(2, 2),
                  weight_shape=(3, 3, 2, 3))),
    kind_case("conv_bwd_weight_nchw_stride3_groups", K.Conv2dBackwardWeight,
             (f(2, 4, 9, 8), f(2, 6, 4, 3)),
             conv(window_strides=(2, 3), padding=((1, 0), (0, 1)), dimension_numbers=NCHW,
                  feature_group_count=2, weight_shape=(6, 2, 3, 2))),
    kind_case("attention_fully_masked_row", K.Attention,
             (f(*Q), f(*KV), f(*V), lambda r: np.arange(5)[:, None] * np.ones(6) > 0),
             dict(ATT, mask_kind="bool")),
    kind_case("attention_bwd_additive_causal", K.AttentionBackward,
             (f(*Q), f(*KV), f(*V), f(1, 2, 5, 6), f(2, 2, 5, 3)),
             dict(ATT, mask_kind="additive", causal=True)),
]
CASES = KIND_CASES + EXTRA


def _claimed(case):
    be = coreml()
    return case.kind in be.SUPPORTED_OPS or case.kind in be.NATIVE_BACKWARD_OPS


def _fits(case, args):
    graph, node = single_node_graph(case.kind, [(a.shape, a.dtype) for a in args], case.attrs)
    pred = coreml().CLAIM_PREDICATES.get(case.kind)
    return graph, node, pred is None or pred(node)


NATIVE = [c for c in CASES if _claimed(c) and c.name != "maxpool_bwd_overlap"]


def run_native(case, **options):
    args = [m(np.random.RandomState(0)) for m in case.operands]
    graph, node, fits = _fits(case, args)
    assert fits, f"{case.name}: the kernel's claim predicate refuses this configuration"
    legal = legalize(graph, kept_kinds(coreml()), backend="coreml")
    assert legal.kinds() - {K.Input, K.Constant} == {case.kind}, "not kept as one native node"
    got = coreml().lower(legal, name=case.name, **options)(*args)
    return args, node, graph, got


@pytest.mark.parametrize("case", NATIVE, ids=lambda c: c.name)
def test_native_kernel_matches_jax_and_decomposition(case):
    args, node, graph, got = run_native(case)
    want = evaluate(node, *args)
    want = want if isinstance(want, tuple) else (want,)
    decomposed = legalize(graph, PRIMITIVE | CONTROL, backend="xla")   # (Lstm's: a Scan)
    assert case.kind not in decomposed.kinds()
    ref = all_backends()["xla"].lower(decomposed, name=case.name)(*args)
    assert len(got) == len(want) == len(ref)
    for g, w, d in zip(got, want, ref):
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, np.asarray(w), atol=1e-4, rtol=1e-4, err_msg="vs JAX")
        np.testing.assert_allclose(g, np.asarray(d), atol=1e-4, rtol=1e-4,
                                   err_msg="vs the decomposition on xla")


@pytest.mark.parametrize("case", NATIVE, ids=lambda c: c.name)
def test_native_kernel_in_float16(case):
    """The kernels build and run in float16 (every constant they make takes the operands'
    dtype); results against the float32 reference, to float16 accuracy."""
    args32 = [m(np.random.RandomState(0)) for m in case.operands]
    args = [a.astype(np.float16) if a.dtype == np.float32 else a for a in args32]
    graph, node = single_node_graph(case.kind, [(a.shape, a.dtype) for a in args], case.attrs)
    legal = legalize(graph, kept_kinds(coreml()), backend="coreml")
    assert case.kind in legal.kinds()
    got = coreml().lower(legal, name=case.name, compute_precision="float16")(*args)
    want = evaluate(node, *args32)
    for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
        w = np.asarray(w)
        assert g.dtype == np.float16
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g.astype(np.float32), w, atol=5e-3 * scale, rtol=0)


ATTENTION = [c for c in NATIVE if c.kind is K.Attention]


@pytest.mark.parametrize("case", ATTENTION, ids=lambda c: c.name)
def test_attention_uses_sdpa_from_ios18_only(case):
    """Given:  one Attention node (the NATIVE attention cases)
       Result: iOS18 target: one scaled_dot_product_attention, no softmax; default target:
               no scaled_dot_product_attention, one softmax and two matmuls; iOS18 values
               equal the reference"""
    args = [m(np.random.RandomState(0)) for m in case.operands]
    graph, node = single_node_graph(case.kind, [(a.shape, a.dtype) for a in args], case.attrs)
    be = coreml()
    new = be.build_program(graph, minimum_deployment_target="iOS18").op_counts()
    old = be.build_program(graph).op_counts()
    assert new.get("scaled_dot_product_attention") == 1 and "softmax" not in new
    assert "scaled_dot_product_attention" not in old
    assert old["softmax"] == 1 and old["matmul"] == 2
    got = be.lower(graph, name=case.name, minimum_deployment_target="iOS18")(*args)
    np.testing.assert_allclose(got[0], np.asarray(evaluate(node, *args)), atol=1e-5, rtol=1e-4)


def test_fully_masked_row_attends_uniformly():
    """The contract: masked scores are the dtype's minimum, not -inf, so no NaN."""
    case = next(c for c in EXTRA if c.name == "attention_fully_masked_row")
    args, node, graph, got = run_native(case)
    assert np.isfinite(got[0]).all()
    np.testing.assert_allclose(got[0][:, :, 0], np.broadcast_to(
        args[2].mean(axis=2), got[0][:, :, 0].shape), atol=1e-5)


UNCLAIMED = [
    ("maxpool_overlapping", K.MaxPool2dBackward, [((2, 7, 7, 3), F32), ((2, 3, 3, 3), F32)],
     dict(POOL, window_dimensions=(1, 3, 3, 1))),
    ("maxpool_padded", K.MaxPool2dBackward, [((1, 4, 4, 1), F32), ((1, 3, 3, 1), F32)],
     dict(POOL, padding=((0, 0), (1, 1), (1, 1), (0, 0)))),
    ("conv_input_dilated_runtime_weight", K.Conv2dBackwardInput,
     [((1, 3, 3, 2), F32), ((3, 3, 2, 2), F32)],
     conv(window_strides=(1, 1), padding=((0, 0), (0, 0)), rhs_dilation=(2, 2),
          input_shape=(1, 7, 7, 2))),
    ("conv_weight_strided_and_dilated", K.Conv2dBackwardWeight,
     [((1, 9, 9, 2), F32), ((1, 3, 3, 2), F32)],
     conv(padding=((0, 0), (0, 0)), rhs_dilation=(2, 2), weight_shape=(3, 3, 2, 2))),
    ("conv_input_lhs_dilated", K.Conv2dBackwardInput, [((1, 3, 3, 2), F32), ((3, 3, 2, 2), F32)],
     conv(window_strides=(1, 1), padding=((0, 0), (0, 0)), lhs_dilation=(2, 2),
          input_shape=(1, 3, 3, 2))),
]


@pytest.mark.parametrize("name,kind,operands,attrs", UNCLAIMED, ids=lambda v: str(v)[:40])
def test_configurations_without_a_kernel_are_decomposed(name, kind, operands, attrs):
    """Given:  one MaxPool2dBackward / Conv2dBackward* node in a configuration its kernel does
               not handle (overlapping or padded windows, dilations)
       Result: the claim predicate refuses it; legalization leaves no node of that kind; the
               kernel called directly raises LoweringError naming the kind"""
    graph, node = single_node_graph(kind, operands, attrs)
    assert not coreml().CLAIM_PREDICATES[kind](node)
    legal = legalize(graph, kept_kinds(coreml()), backend="coreml")
    assert kind not in legal.kinds()
    with pytest.raises(LoweringError, match=kind.name):
        coreml().build_program(graph)            # the kernel itself refuses, naming the op


def test_layer_norm_with_constant_parameters_is_one_mil_op():
    """Given:  nn.layer_norm(x, gamma, beta), gamma and beta closed-over constants
       Result: one MIL layer_norm, no mul or add; values equal nn.layer_norm"""
    r = np.random.RandomState(3)
    gamma, beta = r.rand(8).astype(np.float32) + 0.5, r.randn(8).astype(np.float32)
    x = r.randn(2, 5, 8).astype(np.float32)
    fn = rlx_jax.jit(lambda x: nn.layer_norm(x, gamma, beta), backend="coreml")
    counts = fn.lower(x).op_counts(level="backend")
    assert counts.get("layer_norm") == 1 and "mul" not in counts and "add" not in counts
    np.testing.assert_allclose(fn(x), nn.layer_norm(x, gamma, beta), atol=1e-5, rtol=1e-5)


# ---- structure, as MIL op counts (programs are built, not run) ----
def native_and_decomposed_counts(kind, operands, attrs):
    graph, _ = single_node_graph(kind, operands, attrs)
    be = coreml()
    native = be.build_program(legalize(graph, kept_kinds(be), backend="coreml")).op_counts()
    decomposed = legalize(graph, kept_kinds(be, native_backward=False) - {kind}, backend="coreml")
    assert kind not in decomposed.kinds()
    return native, be.build_program(decomposed).op_counts()


def test_rms_norm_backward_input_kernel_is_small():
    """Given:  one RmsNormBackwardInput node, x (4, 16, 64), gamma (64,), dy (4, 16, 64)
       Result: native: 7 mul, 2 reduce_mean, 1 rsqrt, 1 sub: at most 13 kernel
               ops, fewer than the decomposition's; no tile, reshape or expand_dims"""
    native, decomposed = native_and_decomposed_counts(
        K.RmsNormBackwardInput, [((4, 16, 64), F32), ((64,), F32), ((4, 16, 64), F32)],
        dict(eps=1e-6))
    assert kernel_ops(native) <= 13
    assert kernel_ops(native) < kernel_ops(decomposed)
    assert native == {"mul": 7, "reduce_mean": 2, "rsqrt": 1, "sub": 1}
    assert not {"tile", "reshape", "expand_dims"} & set(native)


def _maxpool_counts(n, c, h, w):
    graph, _ = single_node_graph(K.MaxPool2dBackward, [((n, c, h, w), F32),
                                                       ((n, c, h // 2, w // 2), F32)],
                                 dict(window_dimensions=(1, 1, 2, 2), window_strides=(1, 1, 2, 2),
                                      padding=((0, 0),) * 4))
    legal = legalize(graph, kept_kinds(coreml()), backend="coreml")
    assert legal.kinds() - {K.Input, K.Constant} == {K.MaxPool2dBackward}
    return coreml().build_program(legal).op_counts()


def test_max_pool_backward_kernel_is_o_input_without_scatter():
    """Given:  one MaxPool2dBackward node (2x2 window, stride 2, NCHW) at (8, 32, 28, 28) and at
               (1, 2, 4, 4)
       Result: the same MIL op counts at both sizes: the first maximum of each window as one
               reduce_max and one reduce_min (not reduce_argmax, which promises no tie order),
               no scatter op, at most 14 kernel ops"""
    big = _maxpool_counts(8, 32, 28, 28)
    assert not [op for op in big if "scatter" in op]
    assert big == _maxpool_counts(1, 2, 4, 4)          # op count independent of the size
    assert big["reduce_max"] == big["reduce_min"] == 1 and "reduce_argmax" not in big
    assert kernel_ops(big) <= 14


def _sce_counts(classes):
    b = Builder()
    logits, labels, dloss = b.input((8, classes), F32), b.input((8,), I32), b.input((8,), F32)
    loss = b.add(K.SoftmaxCrossEntropyWithLogits, (logits, labels), {})
    grad = b.add(K.SoftmaxCrossEntropyBackward, (logits, labels, dloss), {})
    b.graph.outputs = [loss, grad]
    legal = legalize(b.graph, kept_kinds(coreml()), backend="coreml")
    assert legal.kinds() - {K.Input, K.Constant} == {K.SoftmaxCrossEntropyWithLogits,
                                                      K.SoftmaxCrossEntropyBackward}
    return coreml().build_program(legal).op_counts()


def test_softmax_cross_entropy_is_constant_size_at_vocabulary_scale():
    """Given:  SoftmaxCrossEntropyWithLogits and SoftmaxCrossEntropyBackward over (8, C) logits,
               C = 50257 and C = 10
       Result: the same MIL op counts for both C: at most 25 kernel ops, two one_hot, no
               concat"""
    vocab = _sce_counts(50257)
    assert vocab == _sce_counts(10)
    assert kernel_ops(vocab) <= 25
    assert vocab["one_hot"] == 2 and "concat" not in vocab


# ---- jax.grad of programs written with rlx_jax.nn (and JAX's own conv / pooling) ----
def _block(p, x, y):
    x = x @ p["in"]
    h = nn.rms_norm(x, p["g1"])
    b, s, d = h.shape
    q, k, v = (jnp.einsum("bsd,de->bse", h, p[n]).reshape(b, s, 2, d // 2) for n in "qkv")
    cos, sin = nn.rope_tables(s, d // 2)
    q, k = (nn.rope(t.transpose(0, 2, 1, 3), cos, sin).transpose(0, 2, 1, 3) for t in (q, k))
    a = nn.attention(q, k, v, causal=True, layout="BSHD").reshape(b, s, d)
    h = nn.layer_norm(x + a @ p["o"], p["g2"], p["b2"])
    h = nn.gated_residual(h, p["gate"], nn.ada_layer_norm(h, p["shift"], p["scale"]))
    logits = h.reshape(b * s, d) @ p["out"]
    return jnp.mean(nn.softmax_cross_entropy_with_logits(logits, y.reshape(-1)))


def _block_args(r):
    d, c = 8, 11
    p = {n: r.randn(d, d).astype(np.float32) * 0.4 for n in ("in", "q", "k", "v", "o")}
    p.update(g1=r.rand(d).astype(np.float32) + 0.5, g2=r.rand(d).astype(np.float32) + 0.5,
             b2=r.randn(d).astype(np.float32) * 0.1, out=r.randn(d, c).astype(np.float32),
             gate=r.randn(2, d).astype(np.float32), shift=r.randn(2, d).astype(np.float32),
             scale=r.randn(2, d).astype(np.float32) * 0.3)
    return p, r.randn(2, 5, d).astype(np.float32), r.randint(0, c, (2, 5)).astype(np.int32)


def _cnn(p, x, y):
    dn = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, p["w1"], (1, 1), "SAME", dimension_numbers=dn)
    h = nn.group_norm(jax.nn.relu(h), p["g"], p["b"], num_groups=2)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, p["w2"], (2, 2), ((1, 0), (1, 0)), dimension_numbers=dn)
    logits = h.reshape(h.shape[0], -1) @ p["out"]
    return jnp.mean(nn.softmax_cross_entropy_with_logits(logits, y))


def _cnn_args(r):
    p = dict(w1=r.randn(3, 3, 2, 4).astype(np.float32) * 0.5, g=r.rand(4).astype(np.float32) + .5,
             b=r.randn(4).astype(np.float32) * 0.1, w2=r.randn(2, 2, 4, 3).astype(np.float32),
             out=r.randn(12, 5).astype(np.float32) * 0.5)
    return p, r.randn(2, 8, 8, 2).astype(np.float32), r.randint(0, 5, (2,)).astype(np.int32)


# (loss, argument maker, backward kinds the native graph must keep)
PROGRAMS = {
    "transformer_block": (_block, _block_args, {
        K.RmsNormBackwardInput, K.RmsNormBackwardGamma, K.AttentionBackward,
        K.LayerNormBackwardInput, K.LayerNormBackwardGamma, K.AdaLayerNormBackward,
        K.GatedResidualBackward, K.SoftmaxCrossEntropyBackward}),
    "cnn": (_cnn, _cnn_args, {K.Conv2dBackwardInput, K.Conv2dBackwardWeight,
                              K.MaxPool2dBackward, K.GroupNormBackwardInput,
                              K.GroupNormBackwardGamma, K.GroupNormBackwardBeta,
                              K.SoftmaxCrossEntropyBackward}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradients_native_vs_jax_and_decomposed(name):
    """Given:  value_and_grad of a transformer block / a CNN written with rlx_jax.nn
       Result: native_backward=True: the IR keeps every backward kind of PROGRAMS[name];
               native_backward=False: no backward kind; both equal jax"""
    loss, make, kinds = PROGRAMS[name]
    args = make(np.random.RandomState(0))
    grad = jax.value_and_grad(loss)
    native = rlx_jax.jit(grad, backend="coreml")
    decomposed = rlx_jax.jit(grad, backend="coreml", native_backward=False)
    nat_ir = native.lower(*args).op_counts()
    dec_ir = decomposed.lower(*args).op_counts()
    assert kinds <= {K[k] for k in nat_ir}, f"native graph lacks {kinds - {K[k] for k in nat_ir}}"
    assert not {K[k] for k in dec_ir} & BACKWARD
    want = grad(*args)
    got, ref = native(*args), decomposed(*args)
    for g, w, d in zip(jax.tree.leaves(got), jax.tree.leaves(want), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-4, rtol=2e-4)
        np.testing.assert_allclose(np.asarray(g), np.asarray(d), atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("strides,padding,dilation", [
    ((2, 2), ((1, 1), (0, 1)), (1, 1)),
    ((1, 2), ((2, 0), (1, 1)), (2, 1)),
    ((3, 1), ((-1, 0), (0, 0)), (1, 1)),
])
def test_conv_input_gradient_with_constant_weight_uses_conv_transpose(strides, padding, dilation):
    """(grouped convolutions are not recognised as Conv2dBackwardInput: the contract)

       Given:  jax.grad w.r.t. x of sum(sin(conv(x, w))), w a constant, strided / padded /
               dilated
       Result: a Conv2dBackwardInput node in the IR; one MIL conv_transpose; values equal jax"""
    w = np.random.RandomState(1).randn(3, 3, 4, 4).astype(np.float32)

    def loss(x):
        y = lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.sin(y))
    x = np.random.RandomState(2).randn(2, 9, 8, 4).astype(np.float32)
    fn = rlx_jax.jit(jax.grad(loss), backend="coreml")
    lowered = fn.lower(x)
    assert "Conv2dBackwardInput" in lowered.op_counts()
    assert lowered.op_counts(level="backend").get("conv_transpose") == 1
    np.testing.assert_allclose(fn(x), jax.grad(loss)(x), atol=1e-4, rtol=1e-4)
