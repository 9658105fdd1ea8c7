"""Legalization (claims, native backward kinds, decompositions), structurally: the exact ops left for a backend that claims a chosen
set of kinds; expansion to a fixpoint; one LegalizationError naming every offender and its
source line; native backward kernels kept or decomposed; a decomposition that applies to some
nodes of its kind only (ReducePrecision to the operand's own format); the device probe."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends import supports
from rlx_jax.backends.base import (Backend, all_backends, kept_kinds, register_backend,
                                   unregister_backend)
from rlx_jax.errors import LegalizationError, LoweringError
from rlx_jax.ir.graph import Builder
from rlx_jax.ir.ops import BACKWARD, PRIMITIVE, OpKind as K
from rlx_jax.passes.legalize import legalize
from rlx_jax.tables import LoweringTable

from .conftest import BACKENDS

F32 = np.float32


class FakeBackend(Backend):
    """A backend that only has claim tables."""

    def __init__(self, supported=(), native_backward=(), backward=()):
        self.name = "fake"
        self.SUPPORTED_OPS = frozenset(supported)
        self.NATIVE_BACKWARD_OPS = frozenset(native_backward)
        self.BACKWARD_OPS = frozenset(backward)
        self.CLAIM_PREDICATES = {}


def ops(graph):
    """The graph's ops in order, as 'Kind' or 'Kind[fn]' (boundary nodes left out)."""
    return [n.kind.name + (f"[{n.attrs['fn']}]" if "fn" in n.attrs else "")
            for n in graph.nodes if n.kind not in (K.Input, K.Constant)]


def rms_graph(src="model.py:3 (block)"):
    b = Builder(src=src)
    x, g = b.input((4, 8), F32), b.input((8,), F32)
    b.graph.outputs = [b.add(K.RmsNorm, (x, g), dict(eps=1e-6, has_beta=False))]
    return b.graph


def test_claimed_kind_is_kept():
    """Given:  y = RmsNorm(x, g); the backend claims PRIMITIVE + RmsNorm
       Result: RmsNorm"""
    fake = FakeBackend(PRIMITIVE | {K.RmsNorm})
    assert ops(legalize(rms_graph(), kept_kinds(fake))) == ["RmsNorm"]


def test_unclaimed_kind_is_decomposed():
    """Given:  y = RmsNorm(x, g); the backend claims PRIMITIVE only
       Result: x*x, sum, keepdims reshape, /D, +eps, rsqrt, x*r, gamma reshape, *gamma"""
    fake = FakeBackend(PRIMITIVE)
    assert ops(legalize(rms_graph(), kept_kinds(fake))) == [
        "Binary[mul]", "Reduce[sum]", "Reshape", "Binary[div]", "Binary[add]",
        "Activation[rsqrt]", "Binary[mul]", "Reshape", "Binary[mul]"]


def sce_backward_graph():
    b = Builder()
    logits, labels, dloss = b.input((4, 10), F32), b.input((4,), np.int32), b.input((4,), F32)
    b.graph.outputs = [b.add(K.SoftmaxCrossEntropyBackward, (logits, labels, dloss))]
    return b.graph


def test_fixpoint_expansion_keeps_claimed_intermediate_kinds():
    """Given:  SoftmaxCrossEntropyBackward, whose decomposition emits a Softmax node
       Result: claimed Softmax stays; the one-hot is Iota + Compare + Cast"""
    fake = FakeBackend(PRIMITIVE | {K.Softmax})
    assert ops(legalize(sce_backward_graph(), kept_kinds(fake))) == [
        "Softmax", "Iota", "Reshape", "Compare[eq]", "Cast", "Binary[sub]", "Reshape",
        "Binary[mul]"]


def test_fixpoint_expansion_decomposes_intermediate_kinds():
    """Given:  the same graph; the backend does not claim Softmax
       Result: the Softmax is expanded in the next round"""
    fake = FakeBackend(PRIMITIVE)
    assert ops(legalize(sce_backward_graph(), kept_kinds(fake))) == [
        "Reduce[max]", "Reshape", "Binary[sub]", "Activation[exp]", "Reduce[sum]", "Reshape",
        "Binary[div]", "Iota", "Reshape", "Compare[eq]", "Cast", "Binary[sub]", "Reshape",
        "Binary[mul]"]


def test_one_error_names_every_offender_with_its_source_line():
    """Given:  RmsNorm (user line model.py:3) and a Cumsum (model.py:9, no decomposition);
               the backend claims Binary and Reduce only
       Result: one LegalizationError listing the decomposition's two Reshapes and its rsqrt
               Activation (at the RmsNorm's line) and the Cumsum (at its own line)"""
    b = Builder(src="model.py:3 (block)")
    x, g = b.input((4, 8), F32), b.input((8,), F32)
    y = b.add(K.RmsNorm, (x, g), dict(eps=1e-6, has_beta=False))
    b.src = "model.py:9 (block)"
    b.graph.outputs = [b.add(K.Cumsum, (y,), dict(axis=0, reverse=False))]
    fake = FakeBackend({K.Binary, K.Reduce})
    with pytest.raises(LegalizationError) as info:
        legalize(b.graph, kept_kinds(fake), backend="fake")
    msg = str(info.value)
    assert "backend 'fake' cannot run 4 node(s)" in msg
    lines = [ln for ln in msg.splitlines() if ln.startswith("  ") and "`" in ln]
    assert [ln.split(":")[0].strip() for ln in lines] == [
        "Reshape", "Activation", "Reshape", "Cumsum"]
    assert all(ln.endswith("at model.py:3 (block)") for ln in lines[:3])
    assert lines[3].endswith("at model.py:9 (block)")


def test_error_carries_the_user_line_from_tracing():
    """Given:  f(x) = lax.cumsum(x, 0) traced from this file: one Cumsum node; the backend
               claims Binary only
       Result: LegalizationError naming `Cumsum` at test_legalize.py:<line> (f)"""
    def f(x):
        return jax.lax.cumsum(x, 0)        # no decomposition for Cumsum
    graph = rlx_jax.trace(f, np.ones((3,), F32))
    with pytest.raises(LegalizationError, match=r"Cumsum: `.*`  at test_legalize.py:\d+ \(.*f\)"):
        legalize(graph, {K.Binary}, backend="fake")


def reduce_precision_graph(dtype, exponent_bits, mantissa_bits):
    b = Builder()
    x = b.input((3,), dtype)
    b.graph.outputs = [b.add(K.ReducePrecision, (x,), dict(exponent_bits=exponent_bits,
                                                          mantissa_bits=mantissa_bits))]
    return b.graph


@pytest.mark.parametrize("dtype,bits", [(F32, (8, 23)), (F32, (11, 52)), (np.float16, (5, 10)),
                                        (np.float16, (8, 23))])
def test_reduce_precision_to_a_format_holding_the_dtype_is_folded(dtype, bits):
    """Given:  y = reduce_precision(x, e, m) with e, m >= x's dtype's own exponent and mantissa
               bits; the backend claims PRIMITIVE but ReducePrecision
       Result: no op left: the output is the input"""
    fake = FakeBackend(PRIMITIVE - {K.ReducePrecision})
    legal = legalize(reduce_precision_graph(dtype, *bits), kept_kinds(fake))
    assert ops(legal) == [] and legal.outputs[0] is legal.inputs[0]


@pytest.mark.parametrize("dtype,bits", [(F32, (5, 10)), (F32, (8, 22)), (F32, (7, 23)),
                                        (np.float16, (5, 9)), (np.float16, (4, 10))])
def test_rounding_reduce_precision_stays_refused(dtype, bits):
    """Given:  y = reduce_precision(x, e, m) narrower than x's dtype in e or m; the backend
               claims PRIMITIVE but ReducePrecision
       Result: LegalizationError naming the ReducePrecision node"""
    fake = FakeBackend(PRIMITIVE - {K.ReducePrecision})
    with pytest.raises(LegalizationError, match=r"cannot run 1 node\(s\)(.|\n)*ReducePrecision"):
        legalize(reduce_precision_graph(dtype, *bits), kept_kinds(fake), backend="fake")


@pytest.mark.parametrize("backend", BACKENDS)
def test_remat_with_a_saving_policy_runs_everywhere(backend):
    """Given:  the gradient of a jax.checkpoint with policy everything_saveable, whose jaxpr
               saves a residual through reduce_precision(x, 8, 23) on float32
       Result: the backend runs it (Core ML by folding the identity) and matches JAX"""
    def f(x):
        return jnp.sum(jnp.cos(jnp.sin(x)) * x)
    g = jax.grad(jax.checkpoint(f, policy=jax.checkpoint_policies.everything_saveable))
    x = np.linspace(-2, 2, 7).astype(F32)
    assert "reduce_precision" in str(jax.make_jaxpr(g)(x))
    np.testing.assert_allclose(rlx_jax.jit(g, backend=backend)(x), g(x), rtol=1e-5, atol=1e-6)


def rms_grad_graph():
    def loss(x, g):
        return (rlx_jax.nn.rms_norm(x, g) ** 2).sum()
    x, g = np.ones((4, 8), F32), np.ones((8,), F32)
    return rlx_jax.trace(jax.grad(loss, argnums=(0, 1)), x, g)


def test_native_backward_kinds_are_kept_only_with_native_backward():
    """Given:  grad of an RMSNorm loss; the backend has native RmsNorm backward kernels
       Result: kept with native_backward=True; decomposed with native_backward=False"""
    fake = FakeBackend(PRIMITIVE | {K.RmsNorm},
                       native_backward={K.RmsNormBackwardInput, K.RmsNormBackwardGamma})
    on = legalize(rms_grad_graph(), kept_kinds(fake, native_backward=True))
    off = legalize(rms_grad_graph(), kept_kinds(fake, native_backward=False))
    assert {k for k in on.op_counts() if "Backward" in k} == {
        "RmsNormBackwardInput", "RmsNormBackwardGamma"}
    assert not any("Backward" in k for k in off.op_counts())


def test_backward_ops_are_never_kept():
    """BACKWARD_OPS are run by decomposition only, even if also listed as supported.

       Given:  grad of an RMSNorm loss; the backend claims PRIMITIVE + RmsNormBackwardGamma and
               lists RmsNormBackwardInput/Gamma in BACKWARD_OPS
       Result: no backward kind is kept; no *Backward op is left after legalization"""
    fake = FakeBackend(PRIMITIVE | {K.RmsNormBackwardGamma},
                       backward={K.RmsNormBackwardInput, K.RmsNormBackwardGamma})
    keep = kept_kinds(fake)
    assert not keep & BACKWARD
    assert not any("Backward" in k for k in legalize(rms_grad_graph(), keep).op_counts())


def test_jit_native_backward_false_decomposes_every_backward_kind(monkeypatch):
    """Given:  jax.grad of an RMSNorm loss on xla, made to claim native RmsNorm backward kernels
       Result: native_backward=True: RmsNormBackwardInput is in the legalized IR (and lowering
               refuses it: xla has no such rule); native_backward=False: no *Backward op, and
               the values equal jax.grad"""
    xla = all_backends()["xla"]
    monkeypatch.setattr(xla, "NATIVE_BACKWARD_OPS",
                        frozenset({K.RmsNormBackwardInput, K.RmsNormBackwardGamma}))

    def loss(x, g):
        return (rlx_jax.nn.rms_norm(x, g) ** 2).sum()
    x = np.random.RandomState(0).randn(4, 8).astype(F32)
    g = np.ones((8,), F32)
    grad = jax.grad(loss, argnums=(0, 1))
    native = rlx_jax.jit(grad, backend="xla")
    assert "RmsNormBackwardInput" in native.lower(x, g).legalized.op_counts()
    with pytest.raises(LoweringError, match="no lowering for RmsNormBackwardInput"):
        native(x, g)                      # the claim is honoured: xla has no such kernel
    decomposed = rlx_jax.jit(grad, backend="xla", native_backward=False)
    assert not any("Backward" in k for k in decomposed.lower(x, g).legalized.op_counts())
    for got, want in zip(decomposed(x, g), grad(x, g)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)


def test_probe_accepts_claimed_backward_and_decomposable_kinds():
    """Given:  grad of an RMSNorm loss; and a single RmsNormBackwardInput node
       Result: supports() is true for a PRIMITIVE backend (all decomposes); for a Binary-only
               one it is false and lists the host ops (rsqrt, ...); a kind in BACKWARD_OPS is
               decomposed as jit does, so its reductions are host-placed too; xla runs both"""
    graph = rms_grad_graph()
    assert supports(FakeBackend(PRIMITIVE), graph)                 # everything decomposes
    binary = supports(FakeBackend({K.Binary}), graph)
    assert not binary
    assert {n.kind for n, _ in binary.host} >= {K.Activation, K.Reduce}, binary
    assert all("no lowering for" in why for _, why in binary.host)
    b = Builder()
    x, g, dy = b.input((4, 8), F32), b.input((8,), F32), b.input((4, 8), F32)
    b.graph.outputs = [b.add(K.RmsNormBackwardInput, (x, g, dy), dict(eps=1e-6))]
    listed = FakeBackend({K.Binary}, backward={K.RmsNormBackwardInput})
    assert not supports(listed, b.graph)    # BACKWARD_OPS are decomposed, never kept
    with pytest.raises(LegalizationError):
        legalize(b.graph, kept_kinds(listed))
    assert supports("xla", graph) and supports("xla", b.graph)
    assert rlx_jax.backends.supports("xla", rms_graph())


MINIMAL_RULES = LoweringTable("rlx_test_minimal")
for _kind in (K.Constant, K.Binary, K.Activation, K.DotGeneral, K.Reduce, K.Reshape, K.Expand,
              K.Transpose, K.Compare, K.Where, K.Cast):
    MINIMAL_RULES.rule(_kind)(all_backends()["xla"].rules()[_kind])


class MinimalBackend(Backend):
    """A new backend as docs/backends.md describes it: a name, a lowering table whose rules say
    what they claim, and lower; it runs Binary / Activation / DotGeneral (and what decomposes
    into them) with the xla backend's rules, every other hook left at Backend's default."""
    name = "rlx_test_minimal"

    def rules(self):
        return MINIMAL_RULES

    def lower(self, graph, name=None, **options):
        return all_backends()["xla"].lower(graph)


def test_a_backend_is_one_subclass_of_backend():
    """Subclassing Backend is all a backend needs: jit places, legalizes (softmax decomposed:
    it is not claimed) and runs it, equal to jax.jit."""
    register_backend(MinimalBackend())
    try:
        f = lambda w, x: jax.nn.softmax(jnp.tanh(x @ w), axis=-1)  # noqa: E731
        w, x = np.ones((3, 4), np.float32) / 3, np.arange(6, dtype=np.float32).reshape(2, 3)
        low = rlx_jax.jit(f, backend="rlx_test_minimal").lower(w, x)
        claimed = all_backends()["rlx_test_minimal"].SUPPORTED_OPS
        assert claimed == set(MINIMAL_RULES) | {K.Input}
        assert set(low.op_counts()) <= {k.name for k in claimed}
        assert "Softmax" not in low.op_counts()
        np.testing.assert_allclose(np.asarray(low.compile()(w, x)), jax.jit(f)(w, x),
                                   rtol=1e-6)
        with pytest.raises(rlx_jax.errors.BadArgumentError, match="no backend-level program"):
            low.op_counts("backend")
    finally:
        unregister_backend("rlx_test_minimal")
    assert "rlx_test_minimal" not in all_backends()
