"""Generated patterns (passes/patterns.py, passes/pattern_table.py): formulas written with
jax.nn, flax and optax become RLX's high-level and backward kinds, exactly or not at all.

Structural: the exact op counts of a small flax LM forward and Adam training step with and
without recognition. Numerics: every recognised program equals JAX, forward and jax.grad, on
every backend. Negatives: near-miss formulas keep their primitive ops."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlx_jax
from rlx_jax.errors import BadArgumentError
from rlx_jax.passes.pattern_table import PATTERNS, R
from rlx_jax.passes.recognize import recognize

from .conftest import BACKENDS

fnn = pytest.importorskip("flax.linen")

V, D, H, S, B = 17, 16, 2, 6, 2
RNG = np.random.default_rng(0)


class Block(fnn.Module):
    @fnn.compact
    def __call__(self, x, mask):
        h = fnn.LayerNorm()(x)
        x = x + fnn.MultiHeadDotProductAttention(num_heads=H)(h, h, mask=mask)
        h = fnn.LayerNorm()(x)
        return x + fnn.Dense(D)(jax.nn.gelu(fnn.Dense(4 * D)(h)))


class LM(fnn.Module):
    @fnn.compact
    def __call__(self, tokens):
        x = fnn.Embed(V, D)(tokens)
        x = Block()(x, fnn.make_causal_mask(tokens))
        return fnn.Dense(V)(fnn.LayerNorm()(x))


MODEL = LM()
TOKENS = RNG.integers(0, V, (B, S)).astype(np.int32)
LABELS = RNG.integers(0, V, (B, S)).astype(np.int32)
PARAMS = MODEL.init(jax.random.PRNGKey(0), TOKENS)
OPT = optax.adam(1e-3)
STATE = OPT.init(PARAMS)


def lm_forward(params, tokens):
    return MODEL.apply(params, tokens)


def lm_loss(params, tokens, labels):
    logits = MODEL.apply(params, tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def lm_step(params, state, tokens, labels):
    loss, grads = jax.value_and_grad(lm_loss)(params, tokens, labels)
    updates, state = OPT.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


FWD_BASE = {"Activation": 13, "Binary": 47, "Cast": 1, "Compare": 3, "DotGeneral": 9,
            "Expand": 15, "Gather": 1, "Iota": 1, "Reduce": 8, "Reshape": 13, "Transpose": 1,
            "Where": 2}
FWD_REC = {"Activation": 1, "Attention": 1, "Binary": 10, "Cast": 1, "Compare": 3,
           "DotGeneral": 7, "Expand": 5, "Gather": 1, "Iota": 1, "LayerNorm": 3, "Reshape": 7,
           "Where": 1}
STEP_BASE = {"Activation": 91, "Binary": 414, "Cast": 3, "Compare": 13, "DotGeneral": 27,
             "Expand": 45, "Gather": 3, "Iota": 1, "Reduce": 38, "Reshape": 47, "ScatterAdd": 3,
             "Transpose": 12, "Where": 15}
STEP_KINDS = {"AdamUpdate": 1, "Attention": 1, "AttentionBackward": 1, "LayerNorm": 3,
              "LayerNormBackwardGamma": 3, "LayerNormBackwardInput": 3,
              "SoftmaxCrossEntropyBackward": 1, "SoftmaxCrossEntropyWithLogits": 1}
STEP_REC = {  # MLX runs gelu's backward and the embedding's GatherBackward natively
    "mlx": {**STEP_KINDS, "Activation": 1, "ActivationBackward": 1, "Binary": 16, "Cast": 1,
            "Compare": 3, "DotGeneral": 21, "Expand": 6, "Gather": 1, "GatherBackward": 1,
            "Iota": 1, "Reduce": 11, "Reshape": 35, "Transpose": 7, "Where": 1},
    "coreml": {**STEP_KINDS, "Activation": 2, "Binary": 33, "Cast": 1, "Compare": 3,
               "DotGeneral": 21, "Expand": 7, "Gather": 1, "Iota": 1, "Reduce": 11,
               "Reshape": 34, "ScatterAdd": 1, "Transpose": 7, "Where": 1},
}


@pytest.mark.parametrize("backend", [b for b in ("mlx", "coreml") if b in BACKENDS])
def test_lm_op_counts(backend):
    """The flax LM's forward and Adam step: every LayerNorm, the attention, gelu's gradient,
    the cross-entropy and the Adam update become kinds; recognize=False keeps the traced
    primitives."""
    def counts(fn, args, rec):
        return rlx_jax.jit(fn, backend=backend, recognize=rec,       # recognition alone
                           fold_constants=False).lower(*args).op_counts()
    assert counts(lm_forward, (PARAMS, TOKENS), False) == FWD_BASE
    assert counts(lm_forward, (PARAMS, TOKENS), True) == FWD_REC
    step = (PARAMS, STATE, TOKENS, LABELS)
    assert counts(lm_step, step, False) == STEP_BASE
    assert counts(lm_step, step, True) == STEP_REC[backend]


def test_recognize_option():
    with pytest.raises(BadArgumentError, match="recognize"):
        rlx_jax.jit(lm_forward, recognize="yes")


# ---- numerics: each recognised formula equals JAX, forward and jax.grad, on every backend ----
def _f(*shape):
    return lambda r: r.standard_normal(shape).astype(np.float32)


def _flax(module, *shapes):
    """module.apply with parameters as arguments (so they get gradients too)."""
    variables = module.init(jax.random.PRNGKey(1), *[np.ones(s, np.float32) for s in shapes])
    leaves, tree = jax.tree.flatten(variables)
    fn = lambda *a: module.apply(jax.tree.unflatten(tree, a[len(shapes):]), *a[:len(shapes)])  # noqa: E731
    makers = [_f(*s) for s in shapes] + [
        (lambda leaf: lambda r: (np.asarray(leaf) + r.uniform(-.5, .5, leaf.shape)).astype(
            np.float32))(leaf) for leaf in leaves]
    return fn, makers


def _attention(mask):
    def fn(q, k, v):
        m = fnn.make_causal_mask(jnp.zeros(q.shape[:2])) if mask else None
        return fnn.dot_product_attention(q, k, v, mask=m)
    return fn, [_f(2, 5, 2, 4)] * 3


def _sce(logits, labels_seed):
    labels = np.random.RandomState(labels_seed).randint(0, 7, (2, 3)).astype(np.int32)
    return (lambda lg: optax.softmax_cross_entropy_with_integer_labels(lg, labels),
            [_f(2, 3, 7)])


def _jax_attention(**kw):
    """jax.nn.dot_product_attention; mask / bias (a keyword naming a maker) are constants."""
    extra = {k: m(np.random.default_rng(5)) for k, m in kw.pop("consts", {}).items()}
    return (lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **kw, **extra),
            [_f(2, 5, 2, 4)] * 3)


def _eqx(case):
    """An equinox case, built when its test runs (equinox is a test extra)."""
    def build():
        eqx = pytest.importorskip("equinox")
        if case == "layer_norm":
            ln = eqx.nn.LayerNorm(8, eps=1e-4)
            fn = lambda x, w, b: jax.vmap(jax.vmap(eqx.tree_at(  # noqa: E731
                lambda m: (m.weight, m.bias), ln, (w, b))))(x)
            return fn, [_f(3, 4, 8), _f(8), _f(8)]
        if case.startswith("rms_norm"):       # RMSNorm(D), with its bias by default
            bias = case == "rms_norm"
            rms = eqx.nn.RMSNorm(8, eps=1e-4, use_bias=bias)
            where = lambda m: (m.weight, m.bias) if bias else m.weight  # noqa: E731
            fn = lambda x, *wb: jax.vmap(jax.vmap(eqx.tree_at(  # noqa: E731
                where, rms, wb if bias else wb[0])))(x)
            return fn, [_f(3, 4, 8), _f(8)] + [_f(8)] * bias
        mha = eqx.nn.MultiheadAttention(H, 8, key=jax.random.PRNGKey(0))
        params, static = eqx.partition(mha, eqx.is_array)
        mask = np.tril(np.ones((5, 5), bool))
        fn = lambda x, p: jax.vmap(lambda t: eqx.combine(p, static)(  # noqa: E731
            t, t, t, mask=mask))(x)
        return fn, [_f(2, 5, 8), lambda r: params]
    return build


ATTN = {"Attention": 1, "AttentionBackward": 1}
LN = {"LayerNorm": 1, "LayerNormBackwardInput": 1, "LayerNormBackwardGamma": 1}
RMS = {"RmsNorm": 1, "RmsNormBackwardInput": 1, "RmsNormBackwardGamma": 1}
GN = {"GroupNorm": 1, "GroupNormBackwardInput": 1, "GroupNormBackwardGamma": 1}
CASES = {  # name: ((fn, argument makers), the kinds in the recognised gradient program)
    "softmax": ((jax.nn.softmax, [_f(3, 4, 5)]), {"Softmax": 1}),
    "softmax_2d": ((jax.nn.softmax, [_f(6, 9)]), {"Softmax": 1}),
    "flax_layer_norm": (_flax(fnn.LayerNorm(), (3, 4, 8)), LN),
    "flax_layer_norm_2pass": (_flax(fnn.LayerNorm(use_fast_variance=False, epsilon=1e-3),
                                    (5, 8)), LN),
    "flax_rms_norm": (_flax(fnn.RMSNorm(), (3, 4, 8)), RMS),
    "jnp_rms_norm": ((lambda x, g: x * jax.lax.rsqrt(jnp.mean(x ** 2, -1, keepdims=True)
                                                     + 1e-5) * g, [_f(3, 8), _f(8)]), RMS),
    "optax_sce": (_sce(None, 3), {"SoftmaxCrossEntropyWithLogits": 1,
                                  "SoftmaxCrossEntropyBackward": 1}),
    "flax_attention": (_attention(False), ATTN),
    "flax_attention_causal": (_attention(True), ATTN),
    "jax_attention": (_jax_attention(), ATTN),
    "jax_attention_scale": (_jax_attention(scale=0.3), ATTN),
    "jax_attention_causal": (_jax_attention(is_causal=True), ATTN),
    "jax_attention_mask": (_jax_attention(consts={"mask": lambda r: r.uniform(size=(
        2, 1, 5, 5)) > 0.3}), ATTN),
    "jax_attention_bias": (_jax_attention(consts={"bias": _f(1, 2, 5, 5)}), ATTN),
    "jax_attention_head_mask": (_jax_attention(consts={"mask": lambda r: r.uniform(size=(
        1, 2, 5, 5)) > 0.3}), ATTN),
    "flax_layer_norm_no_bias": (_flax(fnn.LayerNorm(use_bias=False), (3, 8)), LN),
    "flax_layer_norm_no_scale": (_flax(fnn.LayerNorm(use_scale=False), (3, 8)),
                                 {"LayerNorm": 1, "LayerNormBackwardInput": 1}),
    "flax_layer_norm_no_affine": (_flax(fnn.LayerNorm(use_scale=False, use_bias=False),
                                        (3, 4, 8)), {"LayerNorm": 1,
                                                     "LayerNormBackwardInput": 1}),
    "eqx_layer_norm": (_eqx("layer_norm"), LN),
    "eqx_attention": (_eqx("attention"), ATTN),
    "softmax_axis1": ((lambda x: jax.nn.softmax(x, axis=1), [_f(3, 4, 5)]), {"Softmax": 1}),
    "flax_group_norm": (_flax(fnn.GroupNorm(num_groups=4), (2, 3, 4, 8)), GN),
    "flax_group_norm_2pass": (_flax(fnn.GroupNorm(num_groups=2, use_fast_variance=False,
                                                  epsilon=1e-3), (2, 5, 8)), GN),
    "flax_group_norm_one_group": (_flax(fnn.GroupNorm(num_groups=1), (3, 8)), GN),
    "flax_group_norm_no_bias": (_flax(fnn.GroupNorm(num_groups=None, group_size=2,
                                                    use_bias=False), (2, 3, 8)), GN),
    "flax_group_norm_no_scale": (_flax(fnn.GroupNorm(num_groups=2, use_scale=False),
                                       (2, 3, 8)), {"GroupNorm": 1,
                                                    "GroupNormBackwardInput": 1}),
    "eqx_rms_norm": (_eqx("rms_norm"), RMS),
    "eqx_rms_norm_no_bias": (_eqx("rms_norm_no_bias"), RMS),
    "gelu_tanh": ((jax.nn.gelu, [_f(4, 6)]), {"ActivationBackward": 1}),
    "gelu_erf": ((lambda x: jax.nn.gelu(x, approximate=False), [_f(4, 6)]),
                 {"ActivationBackward": 1}),
    "silu": ((jax.nn.silu, [_f(4, 6)]), {"ActivationBackward": 1}),
}


def _case(name):
    made, kinds = CASES[name]
    return (made() if callable(made) else made), kinds


def _args(makers):
    r = np.random.default_rng(3)
    return [m(r) for m in makers]


def _loss(fn, args):
    shape = jax.eval_shape(fn, *args).shape
    w = np.random.RandomState(7).uniform(0.5, 1.5, shape).astype(np.float32)
    return lambda *a: jnp.sum(fn(*a) * w)


def _close(got, want, tol, what):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=tol, rtol=tol,
                                   err_msg=what)


@pytest.mark.parametrize("name", CASES)
def test_recognised_kinds(name):
    (fn, makers), kinds = _case(name)
    args = _args(makers)
    grad = jax.value_and_grad(_loss(fn, args), argnums=tuple(range(len(args))))
    counts = rlx_jax.jit(grad, backend="xla").lower(*args).graph.op_counts()
    assert {k: counts.get(k, 0) for k in kinds} == kinds, counts
    plain = rlx_jax.jit(grad, backend="xla", recognize=False).lower(*args).graph.op_counts()
    assert not set(plain) & set(kinds)


# variants of a formula whose numerics cost seconds on MLX: their kinds are checked above by
# default, their numerics in the slow step
SLOW_NUMERICS = {"flax_group_norm_2pass", "flax_group_norm_one_group",
                 "flax_group_norm_no_bias", "flax_group_norm_no_scale", "eqx_rms_norm_no_bias"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_NUMERICS
                                  else n for n in CASES])
def test_recognised_numerics(name, backend):
    (fn, makers), _ = _case(name)
    args = _args(makers)
    tol = 1e-5 if backend == "xla" else 1e-4
    _close(rlx_jax.jit(fn, backend=backend)(*args), fn(*args), tol, "forward")
    grad = jax.grad(_loss(fn, args), argnums=tuple(range(len(args))))
    _close(rlx_jax.jit(grad, backend=backend)(*args), grad(*args), 10 * tol, "grad")


@pytest.mark.parametrize("backend", BACKENDS)
def test_lm_loss_and_grads(backend):
    vg = jax.value_and_grad(lm_loss)
    _close(rlx_jax.jit(vg, backend=backend)(PARAMS, TOKENS, LABELS),
           vg(PARAMS, TOKENS, LABELS), 2e-4, "loss and grads")


# ---- negatives: near misses keep their primitive ops ----
def _ln(x, var, eps_inside=True):
    m = jnp.mean(x, -1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(var(x, m) + 1e-5) if eps_inside else \
        (x - m) * jax.lax.rsqrt(var(x, m)) + 1e-5


NEAR_MISSES = {
    "softmax_without_max": lambda x: jnp.exp(x) / jnp.sum(jnp.exp(x), -1, keepdims=True),
    "softmax_max_and_sum_over_other_axes": lambda x: (lambda e: e / jnp.sum(
        e, 1, keepdims=True))(jnp.exp(x - jnp.max(x, 0, keepdims=True))),
    "softmax_over_two_axes": lambda x: jax.nn.softmax(x, axis=(0, 1)),
    "group_norm_stats_over_batch": lambda x: fnn.GroupNorm(
        num_groups=2, reduction_axes=(0, 1), use_scale=False, use_bias=False).apply({}, x),
    "rms_eps_outside": lambda x: x * (jax.lax.rsqrt(jnp.mean(x ** 2, -1, keepdims=True))
                                      + 1e-5),
    "rms_mean_over_axis0": lambda x: x * jax.lax.rsqrt(jnp.mean(x ** 2, 0, keepdims=True)
                                                       + 1e-5),
    "layer_norm_unbiased_var": lambda x: _ln(x, lambda x, m: jnp.var(x, -1, keepdims=True,
                                                                     ddof=1)),
    "layer_norm_abs_var": lambda x: _ln(x, lambda x, m: jnp.mean(jnp.abs(x - m), -1,
                                                                 keepdims=True)),
    "gelu_other_constant": lambda x: 0.5 * x * (1 + jnp.tanh(0.8 * (x + 0.044715 * x ** 3))),
    "layer_norm_eps_outside": lambda x: _ln(x, lambda x, m: jnp.var(x, -1, keepdims=True),
                                            eps_inside=False),
    "layer_norm_mean_over_axis0": lambda x: fnn.LayerNorm(reduction_axes=0, use_scale=False,
                                                          use_bias=False).apply({}, x),
}


ATTRS = {  # a formula, its input's shape, the kind and the attributes it is recognised with
    "softmax_axis0": (lambda x: jax.nn.softmax(x, axis=0), (3, 4, 5), "Softmax", {"axis": 0}),
    "softmax_axis-2": (lambda x: jax.nn.softmax(x, axis=-2), (3, 4, 5), "Softmax",
                       {"axis": 1}),
    "softmax_axis-1": (jax.nn.softmax, (3, 4), "Softmax", {"axis": 1}),
    "group_norm_4": (lambda x: fnn.GroupNorm(num_groups=4, use_scale=False, use_bias=False,
                                             epsilon=1e-3).apply({}, x),
                     (2, 3, 2, 8), "GroupNorm", {"num_groups": 4, "eps": np.float32(1e-3)}),
    "group_norm_size_1": (lambda x: fnn.GroupNorm(num_groups=None, group_size=1,
                                                  use_bias=False).apply(
        {"params": {"scale": jnp.ones(6)}}, x), (2, 5, 6), "GroupNorm",
        {"num_groups": 6, "eps": np.float32(1e-6)}),
}


@pytest.mark.parametrize("name", ATTRS)
def test_recognised_attributes(name):
    """The kind gets the formula's own axis, group count and eps, forward and backward (the
    Softmax and GroupNorm nodes of the gradient program carry the same attributes)."""
    fn, shape, kind, attrs = ATTRS[name]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for prog in (fn, jax.grad(_loss(fn, [x]))):
        got = [{k: n.attrs[k] for k in attrs} for n in recognize(rlx_jax.trace(prog, x)).walk()
               if n.kind.name.startswith(kind)]
        assert got and all(a == attrs for a in got), got


def _attention_formula(q, k, v, depth=None):
    """flax's dot_product_attention written out: the query divided by sqrt(depth) (flax:
    depth = D; None: not scaled)."""
    q = q if depth is None else q / jnp.sqrt(depth).astype(q.dtype)
    s = jnp.einsum("...qhd,...khd->...hqk", q, k)
    return jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(s).astype(q.dtype), v)


def test_attention_formula_is_flax_attention():
    """The control of the attention near misses: with depth D it is recognised."""
    x = np.random.default_rng(0).standard_normal((2, 5, 2, 4)).astype(np.float32)
    fn = lambda x: _attention_formula(x, x, x, jnp.float32(4))  # noqa: E731
    assert recognize(rlx_jax.trace(fn, x)).op_counts() == {"Attention": 1}


ATTENTION_NEAR_MISSES = {  # on x[2, 5, 2, 4] as q, k and v
    "attention_without_scale": lambda x: _attention_formula(x, x, x),
    "attention_scale_1_over_d": lambda x: _attention_formula(x, x, x, jnp.float32(16)),
    "attention_softmax_over_queries": lambda x: jnp.einsum(
        "...hqk,...khd->...qhd", jax.nn.softmax(jnp.einsum(
            "...qhd,...khd->...hqk", x / 2, x), axis=-2), x),
    # grouped-query attention (one k, v head for two query heads): the kind has one head count
    "jax_attention_grouped_query": lambda x: jax.nn.dot_product_attention(x, x[:, :, :1],
                                                                          x[:, :, :1]),
}


@pytest.mark.parametrize("name", [*NEAR_MISSES, *ATTENTION_NEAR_MISSES])
def test_near_misses_are_not_rewritten(name):
    """The near misses keep their primitive ops; in the attention ones only the softmax (a
    jax.nn.softmax of its own) may become a kind, the products stay DotGenerals."""
    fn = NEAR_MISSES.get(name) or ATTENTION_NEAR_MISSES[name]
    shape = (4, 6) if name in NEAR_MISSES else (2, 5, 2, 4)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for prog in (fn, jax.grad(_loss(fn, [x]))):
        graph = rlx_jax.trace(prog, x)
        got = recognize(graph).op_counts()
        if name in NEAR_MISSES:
            assert got == graph.op_counts()
        else:
            assert set(got) - {"Softmax"} <= set(graph.op_counts()), got
            assert got["DotGeneral"] == graph.op_counts()["DotGeneral"]


def test_every_pattern_has_its_trigger():
    """A reference's trigger (the cheap test before its templates are traced) holds for its
    own templates, so it never hides a match."""
    for p in PATTERNS:
        for rank in p.ref.ranks:
            t = p.ref.template(rank)
            present = {(n.kind, n.attrs.get("fn")) for n in t.walk()} | {
                (n.kind, None) for n in t.walk()}
            assert p.ref.trigger <= present, p.name
