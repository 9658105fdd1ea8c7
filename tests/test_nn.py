"""rlx_jax.nn ops: forward and jax.grad through rlx_jax.jit on every available backend against
the plain-JAX reference implementation; exactly one backward node per backward kind in the IR;
second derivatives; vmap; float64 finite differences (x64)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import nn
from rlx_jax.nn import activations as A, attn, losses, norms

from .cases import Case
from .conftest import BACKENDS


def nn_case(name, fn, ref, args, argnums, backward, forward):
    """`fn` (using rlx_jax.nn) against `ref` (plain jnp) on `args` (rng -> tuple of arrays),
    differentiated in `argnums`; the IR holds the `forward` kind and, under jax.grad, one node of
    each `backward` kind."""
    return Case(name, fn=fn, args=args, ref=ref, argnums=argnums, backward=backward,
                forward=forward)


def fl(*shape, lo=-2.0, hi=2.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def mk(*makers):
    return lambda r: tuple(m(r) for m in makers)


X, D = (2, 3, 8), 8
LN = ("LayerNormBackwardInput", "LayerNormBackwardGamma")
RMS = ("RmsNormBackwardInput", "RmsNormBackwardGamma")
ATT = dict(scale=0.5, causal=True, layout="BHSD", mask_kind="none")
LABELS = lambda r: r.randint(0, 10, (2, 3)).astype(np.int32)  # noqa: E731
COS, SIN = (np.asarray(t) for t in nn.rope_tables(5, 8))

CASES = [
    *[nn_case(fn, lambda x, fn=fn: nn.activation(x, fn), lambda x, fn=fn: A.FNS[fn](x),
             mk(fl(*X)), (0,), ("ReluBackward" if fn == "relu" else "ActivationBackward",),
             "Activation") for fn in ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")],
    nn_case("softmax", lambda x: nn.softmax(x, axis=1), lambda x: jax.nn.softmax(x, axis=1),
           mk(fl(*X)), (0,), (), "Softmax"),
    nn_case("log_softmax", nn.log_softmax, jax.nn.log_softmax, mk(fl(*X, lo=-20, hi=20)), (0,),
           (), "LogSoftmax"),
    nn_case("layer_norm", nn.layer_norm, lambda x, g, b: norms.layer_norm_ref(x, g, b, eps=1e-5),
           mk(fl(*X), fl(D), fl(D)), (0, 1, 2), LN, "LayerNorm"),
    nn_case("rms_norm", nn.rms_norm,
           lambda x, g: norms.rms_norm_ref(x, g, eps=1e-6, has_beta=False),
           mk(fl(*X), fl(D)), (0, 1), RMS, "RmsNorm"),
    nn_case("rms_norm_beta", nn.rms_norm,
           lambda x, g, b: norms.rms_norm_ref(x, g, b, eps=1e-6, has_beta=True),
           mk(fl(*X), fl(D), fl(D)), (0, 1, 2), RMS + ("RmsNormBackwardBeta",), "RmsNorm"),
    nn_case("group_norm", lambda x, g, b: nn.group_norm(x, g, b, 4),
           lambda x, g, b: norms.group_norm_ref(x, g, b, num_groups=4, eps=1e-5),
           mk(fl(2, 3, 3, 8), fl(D), fl(D)), (0, 1, 2),
           ("GroupNormBackwardInput", "GroupNormBackwardGamma", "GroupNormBackwardBeta"),
           "GroupNorm"),
    nn_case("attention", lambda q, k, v: nn.attention(q, k, v, scale=0.5, causal=True),
           lambda q, k, v: attn.attention_ref(q, k, v, **ATT),
           mk(fl(2, 2, 5, 4), fl(2, 2, 5, 4), fl(2, 2, 5, 3)), (0, 1, 2),
           ("AttentionBackward",), "Attention"),
    nn_case("attention_mask_bshd",
           lambda q, k, v, m: nn.attention(q, k, v, m, scale=0.5, layout="BSHD"),
           lambda q, k, v, m: attn.attention_ref(q, k, v, m, **dict(
               ATT, causal=False, layout="BSHD", mask_kind="additive")),
           mk(fl(2, 5, 2, 4), fl(2, 6, 2, 4), fl(2, 6, 2, 3), fl(2, 1, 5, 6)), (0, 1, 2),
           ("AttentionBackward",), "Attention"),
    nn_case("rope", lambda x: nn.rope(x, COS, SIN), lambda x: attn.rope_ref(x, COS, SIN),
           mk(fl(2, 2, 5, 8)), (0,),
           ("RopeBackward",), "Rope"),
    nn_case("softmax_cross_entropy", nn.softmax_cross_entropy_with_logits,
           lambda l, y: losses.sce_ref(l.reshape(6, 10), y.reshape(6)).reshape(2, 3),
           mk(fl(2, 3, 10), LABELS), (0,), ("SoftmaxCrossEntropyBackward",),
           "SoftmaxCrossEntropyWithLogits"),
    nn_case("ada_layer_norm", nn.ada_layer_norm,
           lambda x, s, c: norms.ada_layer_norm_ref(x, s, c, eps=1e-6),
           mk(fl(*X), fl(2, D), fl(2, D)), (0, 1, 2), ("AdaLayerNormBackward",), "AdaLayerNorm"),
    nn_case("gated_residual", nn.gated_residual, norms.gated_residual_ref,
           mk(fl(*X), fl(2, D), fl(*X)), (0, 1, 2), ("GatedResidualBackward",), "GatedResidual"),
]
BY_NAME = {c.name: c for c in CASES}


def weighted(fn, shape_of):
    """A scalar loss sum(fn(...) * w) with a fixed random w (a ones cotangent hides errors:
    the gradient of sum(softmax) is zero)."""
    w = np.random.RandomState(7).uniform(0.5, 1.5, shape_of).astype(np.float32)
    return lambda *a: jnp.sum(fn(*a) * w)


def _close(got, want, atol, rtol, what):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=atol, rtol=rtol,
                                   err_msg=what)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_and_grad(case, backend):
    args = case.args(np.random.RandomState(0))
    tol = 1e-5 if backend == "xla" else 1e-4
    _close(rlx_jax.jit(case.fn, backend=backend)(*args), case.ref(*args), tol, tol, "forward")
    shape = jax.eval_shape(case.ref, *args).shape
    got = rlx_jax.jit(jax.grad(weighted(case.fn, shape), argnums=case.argnums),
                      backend=backend)(*args)
    want = jax.grad(weighted(case.ref, shape), argnums=case.argnums)(*args)
    _close(got, want, 10 * tol, 10 * tol, "grad")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_grad_ir_has_one_node_per_backward_kind(case):
    args = case.args(np.random.RandomState(0))
    shape = jax.eval_shape(case.ref, *args).shape
    lowered = rlx_jax.jit(jax.value_and_grad(weighted(case.fn, shape), argnums=case.argnums),
                          backend="xla").lower(*args)
    counts = lowered.graph.op_counts()
    backward = {k: n for k, n in counts.items() if "Backward" in k}
    assert backward == {k: 1 for k in case.backward}
    assert counts[case.forward] == 1
    assert not any("Backward" in k for k in lowered.legalized.op_counts())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_plain_jax_jit_and_grad(case):
    """The primitives are ordinary JAX: jax.jit and jax.grad run their reference impls."""
    args = case.args(np.random.RandomState(0))
    _close(jax.jit(case.fn)(*args), case.ref(*args), 1e-5, 1e-5, "jax.jit forward")
    shape = jax.eval_shape(case.ref, *args).shape
    _close(jax.jit(jax.grad(weighted(case.fn, shape), argnums=case.argnums))(*args),
           jax.grad(weighted(case.ref, shape), argnums=case.argnums)(*args), 1e-5, 1e-4,
           "jax.grad")


@pytest.mark.parametrize("name", ["gelu", "rms_norm", "layer_norm", "attention", "rope",
                                  "softmax_cross_entropy"])
def test_second_derivatives(name):
    case = BY_NAME[name]
    args = case.args(np.random.RandomState(0))
    shape = jax.eval_shape(case.ref, *args).shape

    def gg(fn):
        g = jax.grad(weighted(fn, shape), argnums=0)
        return jax.grad(lambda *a: jnp.sum(g(*a) ** 2), argnums=0)
    _close(rlx_jax.jit(gg(case.fn), backend="xla")(*args), gg(case.ref)(*args), 1e-4, 1e-3,
           "grad of grad")


@pytest.mark.parametrize("name", ["relu", "rms_norm", "layer_norm", "rope"])
def test_vmap_of_grad_keeps_the_backward_kind(name):
    case = BY_NAME[name]
    args = case.args(np.random.RandomState(0))
    batched = (np.stack([args[0], 2 * args[0]]),) + args[1:]
    axes = (0,) + (None,) * (len(args) - 1)
    shape = jax.eval_shape(case.ref, *args).shape
    fn = jax.vmap(jax.grad(weighted(case.fn, shape)), in_axes=axes)
    ref = jax.vmap(jax.grad(weighted(case.ref, shape)), in_axes=axes)
    jitted = rlx_jax.jit(fn, backend="xla")
    _close(jitted(*batched), ref(*batched), 1e-5, 1e-4, "vmap of grad")
    assert sum("Backward" in k for k in jitted.lower(*batched).graph.op_counts()) >= 1


def test_forward_mode_inlines_the_reference():
    x = np.random.RandomState(0).randn(2, 8).astype(np.float32)
    g = np.ones(8, np.float32)

    def f(x):
        return jax.jvp(lambda x: nn.rms_norm(x, g), (x,), (x,))[1]
    _close(rlx_jax.jit(f, backend="xla")(x),
           jax.jvp(lambda x: norms.rms_norm_ref(x, g, eps=1e-6, has_beta=False), (x,), (x,))[1],
           1e-5, 1e-5, "jvp")


def test_bad_arguments_are_named():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="rms_norm"):
        nn.rms_norm(x, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="labels must be integers"):
        nn.softmax_cross_entropy_with_logits(x, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="layout"):
        nn.attention(x[None, None], x[None, None], x[None, None], layout="BSH")
    with pytest.raises(ValueError, match="unknown activation"):
        nn.activation(x, "swish")


@pytest.mark.x64
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_grad_matches_float64_finite_differences(case):
    jax.config.update("jax_enable_x64", True)
    try:
        args = tuple(a.astype(np.float64) if a.dtype == np.float32 else a
                     for a in case.args(np.random.RandomState(0)))
        shape = jax.eval_shape(case.ref, *args).shape
        w = np.random.RandomState(7).uniform(0.5, 1.5, shape)

        def loss(*diff):
            full = list(args)
            for i, d in zip(case.argnums, diff):
                full[i] = d
            return jnp.sum(case.fn(*full) * w)
        rlx_jax.testing.check_grads(loss, tuple(args[i] for i in case.argnums), backend="xla",
                                    directions=3)
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_rank3_is_single_head(backend):
    """[B, S, D] operands: one head; checked against softmax attention written in jnp."""
    r = np.random.RandomState(3)
    q, k, v = (r.randn(2, 5, 8).astype(np.float32) for _ in range(3))

    def ref(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(8.0)
        s = jnp.where(jnp.tril(jnp.ones((5, 5), bool)), s, -jnp.inf)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)

    def f(q, k, v):
        return nn.attention(q, k, v, causal=True)

    _close(rlx_jax.jit(f, backend=backend)(q, k, v), ref(q, k, v), 1e-5, 1e-5, "forward")
    gf = jax.grad(lambda *a: (f(*a) ** 2).sum(), argnums=(0, 1, 2))
    gr = jax.grad(lambda *a: (ref(*a) ** 2).sum(), argnums=(0, 1, 2))
    for got, want in zip(rlx_jax.jit(gf, backend=backend)(q, k, v), gr(q, k, v)):
        _close(got, want, 1e-4, 1e-4, "grad")
