"""Native MLX rules of the high-level and backward kinds against their decompositions on the
xla backend (and so against each other's semantics), one node at a time, over tests/nn_cases."""
import jax
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.base import all_backends, kept_kinds
from rlx_jax.ir.ops import BACKWARD, CONTROL, FORWARD, PRIMITIVE
from rlx_jax.passes.legalize import legalize

from .test_decomp import CASES, single_node_graph

pytestmark = pytest.mark.skipif("mlx" not in rlx_jax.available_backends(),
                                reason="mlx is not installed")
NATIVE = [c for c in CASES if c.kind in (FORWARD | BACKWARD)]


def _np(x):
    from rlx_jax.backends.mlx.runtime import to_numpy
    return to_numpy(x) if type(x).__module__.startswith("mlx") else np.asarray(x)


@pytest.mark.parametrize("case", NATIVE, ids=lambda c: c.name)
def test_native_rule_matches_xla_decomposition(case):
    """Given:  one high-level or backward node (a tests/nn_cases case), e.g. RmsNorm(x, g)
       Result: for mlx, that node alone ({kind: 1}); decomposed for xla, no node of the kind;
               the two agree in shape, dtype and values"""
    mlx_be, xla_be = all_backends()["mlx"], all_backends()["xla"]
    if case.kind not in kept_kinds(mlx_be):
        pytest.skip(f"{case.kind.name} is not claimed by mlx")
    args = [m(np.random.RandomState(0)) for m in case.operands]
    graph, _ = single_node_graph(case.kind, [(a.shape, a.dtype) for a in args], case.attrs)
    native = legalize(graph, kept_kinds(mlx_be), backend="mlx")
    assert native.op_counts() == {case.kind.name: 1}            # kept as one native node
    decomposed = legalize(graph, PRIMITIVE | CONTROL, backend="xla")   # (Lstm's: a Scan)
    assert case.kind not in decomposed.kinds()
    got = mlx_be.lower(native, name=case.name)(*args)
    want = xla_be.lower(decomposed, name=case.name)(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = _np(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, case.name
        np.testing.assert_allclose(g, w, atol=max(case.atol, 1e-5), rtol=1e-4,
                                   err_msg=case.name)


def _model_loss(p, x, labels):
    from rlx_jax import nn
    h = nn.rms_norm(x, p["g"])
    h = nn.layer_norm(h, p["g2"], p["b2"])
    q = h.reshape(2, 4, 2, 4)
    a = nn.attention(q, q, q, causal=True, layout="BSHD").reshape(2, 4, 8)
    logits = (h + a) @ p["w"]
    return jax.numpy.mean(nn.softmax_cross_entropy_with_logits(logits.reshape(8, 5), labels))


def test_rlx_nn_training_graph_runs_native_kernels_and_matches_jax():
    """Given:  jax.grad of a loss over nn.rms_norm, nn.layer_norm, nn.attention and
               nn.softmax_cross_entropy_with_logits, on mlx
       Result: exactly one each of RmsNorm, RmsNormBackwardInput/Gamma, LayerNorm,
               LayerNormBackwardInput/Gamma, Attention, AttentionBackward,
               SoftmaxCrossEntropyBackward; values equal jax"""
    r = np.random.RandomState(0)
    p = {"g": r.rand(8).astype(np.float32) + .5, "g2": r.rand(8).astype(np.float32) + .5,
         "b2": r.randn(8).astype(np.float32), "w": r.randn(8, 5).astype(np.float32)}
    x = r.randn(2, 4, 8).astype(np.float32)
    labels = r.randint(0, 5, (8,)).astype(np.int32)
    grad = jax.grad(_model_loss, argnums=(0, 1))
    f = rlx_jax.jit(grad, backend="mlx")
    counts = f.lower(p, x, labels).op_counts()
    for kind in ("RmsNorm", "RmsNormBackwardInput", "RmsNormBackwardGamma", "LayerNorm",
                 "LayerNormBackwardInput", "LayerNormBackwardGamma", "Attention",
                 "AttentionBackward", "SoftmaxCrossEntropyBackward"):
        assert counts.get(kind) == 1, (kind, counts)
    got, want = f(p, x, labels), jax.jit(grad)(p, x, labels)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(_np(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def test_backend_level_op_counts_are_mlx_primitives():
    """Given:  exp(a) * 2 on mlx
       Result: backend-level ops Broadcast, Exp, Multiply (one each); the backend text is a
               dot digraph"""
    f = rlx_jax.jit(lambda a: jax.numpy.exp(a) * 2, backend="mlx")
    lowered = f.lower(np.ones((2, 3), np.float32))
    assert lowered.op_counts("backend") == {"Broadcast": 1, "Exp": 1, "Multiply": 1}
    assert lowered.as_text("backend").startswith("digraph")
