"""Generated patterns on whole models (passes/pattern_refs.py): an equinox transformer block, a
flax ViT block and a hand-written RMSNorm + SwiGLU block, forward and value_and_grad.

Structural: the exact op counts on mlx and coreml with recognition (the native kinds present)
and with recognize=False (none of them). Numerics: every recognised program equals JAX."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax

from .conftest import BACKENDS

RNG = np.random.default_rng(0)
D, H, S, B = 8, 2, 5, 2
HIGH_LEVEL = {"Attention", "AttentionBackward", "LayerNorm", "LayerNormBackwardInput",
              "LayerNormBackwardGamma", "RmsNorm", "RmsNormBackwardInput",
              "RmsNormBackwardGamma", "ActivationBackward", "Softmax"}


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _fill(shapes):
    """Random parameters for a tree of ShapeDtypeStructs (no initialiser is run)."""
    return jax.tree.map(lambda t: 0.5 * _f32(*t.shape), shapes)


def _loss(fn):
    """A weighted sum of fn's output, so every output element has its own cotangent."""
    def loss(params, x):
        y = fn(params, x)
        return jnp.sum(y * jnp.linspace(0.5, 1.5, y.size).reshape(y.shape))
    return loss


# ---- an equinox transformer block (pre-LN, causal attention, gelu MLP) ----
def _eqx_model():
    eqx = pytest.importorskip("equinox")
    k = jax.random.split(jax.random.PRNGKey(0), 3)

    class EqxBlock(eqx.Module):
        ln1: eqx.nn.LayerNorm
        attn: eqx.nn.MultiheadAttention
        ln2: eqx.nn.LayerNorm
        up: eqx.nn.Linear
        down: eqx.nn.Linear

        def __init__(self):
            self.ln1, self.ln2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
            self.attn = eqx.nn.MultiheadAttention(H, D, key=k[0])
            self.up, self.down = eqx.nn.Linear(D, 2 * D, key=k[1]), eqx.nn.Linear(2 * D, D,
                                                                                    key=k[2])

        def __call__(self, x):      # x: [S, D], one sequence
            h = jax.vmap(self.ln1)(x)
            x = x + self.attn(h, h, h, mask=jnp.tril(jnp.ones((S, S), bool)))
            h = jax.vmap(self.ln2)(x)
            return x + jax.vmap(self.down)(jax.nn.gelu(jax.vmap(self.up)(h)))

    params, static = eqx.partition(eqx.filter_eval_shape(EqxBlock),
                                   lambda t: isinstance(t, jax.ShapeDtypeStruct))
    params = _fill(params)
    fn = lambda p, x: jax.vmap(eqx.combine(p, static))(x)  # noqa: E731
    return fn, params, _f32(B, S, D)


# ---- a flax ViT block (patch embedding, LayerNorm, attention without mask, gelu MLP) ----
def _vit_model():
    fnn = pytest.importorskip("flax.linen")

    class ViT(fnn.Module):
        @fnn.compact
        def __call__(self, img):
            x = fnn.Conv(D, (2, 2), strides=(2, 2), padding="VALID")(img)
            x = x.reshape(x.shape[0], -1, D)
            h = fnn.LayerNorm()(x)
            x = x + fnn.MultiHeadDotProductAttention(num_heads=H)(h, h)
            h = fnn.LayerNorm()(x)
            x = x + fnn.Dense(D)(jax.nn.gelu(fnn.Dense(2 * D)(h)))
            return fnn.LayerNorm()(x)

    img = _f32(B, 4, 4, 3)
    model = ViT()
    return model.apply, _fill(jax.eval_shape(model.init, jax.random.PRNGKey(0), img)), img


# ---- a hand-written RMSNorm + SwiGLU block ----
def _swiglu_model():
    def fn(p, x):
        h = x * jax.lax.rsqrt(jnp.mean(x ** 2, -1, keepdims=True) + 1e-6) * p["g"]
        return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
    params = {"g": 1 + 0.1 * _f32(D), "w1": _f32(D, 3 * D) / 3, "w3": _f32(D, 3 * D) / 3,
              "w2": _f32(3 * D, D) / 5}
    return fn, params, _f32(B, S, D)


MODELS = {"eqx_block": _eqx_model, "flax_vit": _vit_model, "swiglu": _swiglu_model}


@functools.lru_cache(maxsize=None)
def _programs(name):
    fn, params, x = MODELS[name]()
    step = jax.value_and_grad(_loss(fn), argnums=(0, 1))
    return {"fwd": (fn, (params, x)), "step": (step, (params, x))}


# the traced primitives (recognize=False): the same on mlx and coreml
BASE = {
    "eqx_block": {
        "fwd": {"Activation": 7, "Binary": 37, "Cast": 2, "Compare": 3, "DotGeneral": 8,
                "Expand": 33, "Iota": 2, "Reduce": 8, "Reshape": 4, "Transpose": 7, "Where": 4},
        "step": {"Activation": 14, "Binary": 101, "Cast": 2, "Compare": 7, "Concat": 1,
                 "DotGeneral": 24, "Expand": 59, "Iota": 3, "Reduce": 41, "Reshape": 24,
                 "Transpose": 17, "Where": 11}},
    "flax_vit": {
        "fwd": {"Activation": 13, "Binary": 46, "Conv": 1, "DotGeneral": 8, "Expand": 8,
                "Reduce": 8, "Reshape": 14, "Transpose": 1},
        "step": {"Activation": 22, "Binary": 130, "Compare": 6, "Concat": 1, "Conv": 3,
                 "DotGeneral": 24, "Expand": 29, "Iota": 1, "Reduce": 36, "Reshape": 51,
                 "Reverse": 1, "Transpose": 11, "Where": 6}},
    "swiglu": {
        "fwd": {"Activation": 3, "Binary": 7, "DotGeneral": 3, "Expand": 2, "Reduce": 1},
        "step": {"Activation": 3, "Binary": 35, "Concat": 1, "DotGeneral": 9, "Expand": 5,
                 "Iota": 1, "Reduce": 6, "Reshape": 5, "Transpose": 3}},
}
# recognised: the forward programs are the same on both backends; in the steps MLX runs the
# activation's backward natively, Core ML decomposes it (one more Activation, more Binary)
EQX_STEP = {"Attention": 1, "AttentionBackward": 1, "Compare": 1, "Concat": 1, "DotGeneral": 18,
            "Expand": 12, "Iota": 3, "LayerNorm": 2, "LayerNormBackwardGamma": 2,
            "LayerNormBackwardInput": 2, "Reduce": 13, "Reshape": 15, "Transpose": 12,
            "Where": 1}
VIT_STEP = {"Attention": 1, "AttentionBackward": 1, "Concat": 1, "Conv": 1,
            "Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "DotGeneral": 18, "Expand": 2,
            "Iota": 1, "LayerNorm": 3, "LayerNormBackwardGamma": 3, "LayerNormBackwardInput": 3,
            "Reduce": 11, "Reshape": 32, "Transpose": 6}
SWIGLU_STEP = {"Concat": 1, "DotGeneral": 9, "Expand": 2, "Iota": 1, "Reduce": 1, "Reshape": 3,
               "RmsNorm": 1, "RmsNormBackwardGamma": 1, "RmsNormBackwardInput": 1,
               "Transpose": 3}
REC_FWD = {
    "eqx_block": {"Activation": 1, "Attention": 1, "Binary": 5, "Compare": 1, "DotGeneral": 6,
                  "Expand": 6, "Iota": 2, "LayerNorm": 2, "Reshape": 4, "Transpose": 6,
                  "Where": 1},
    "flax_vit": {"Activation": 1, "Attention": 1, "Binary": 9, "Conv": 1, "DotGeneral": 6,
                 "LayerNorm": 3, "Reshape": 8},
    "swiglu": {"Activation": 1, "Binary": 2, "DotGeneral": 3, "RmsNorm": 1},
}
REC_STEP = {
    "mlx": {"eqx_block": {**EQX_STEP, "Activation": 1, "ActivationBackward": 1, "Binary": 16},
            "flax_vit": {**VIT_STEP, "Activation": 1, "ActivationBackward": 1, "Binary": 20},
            "swiglu": {**SWIGLU_STEP, "Activation": 1, "ActivationBackward": 1, "Binary": 13}},
    "coreml": {"eqx_block": {**EQX_STEP, "Activation": 2, "Binary": 33},
               "flax_vit": {**VIT_STEP, "Activation": 2, "Binary": 37},
               "swiglu": {**SWIGLU_STEP, "Activation": 2, "Binary": 18}},
}


@pytest.mark.parametrize("backend", [b for b in ("mlx", "coreml") if b in BACKENDS])
@pytest.mark.parametrize("name", MODELS)
def test_model_op_counts(name, backend):
    """Every LayerNorm / RMSNorm, the attention and the activation's gradient become kinds,
    forward and backward; recognize=False keeps the traced primitives."""
    progs = _programs(name)
    want = {("fwd", False): BASE[name]["fwd"], ("fwd", True): REC_FWD[name],
            ("step", False): BASE[name]["step"], ("step", True): REC_STEP[backend][name]}
    for (prog, rec), counts in want.items():
        fn, args = progs[prog]
        got = rlx_jax.jit(fn, backend=backend, recognize=rec,        # recognition alone
                          fold_constants=False).lower(*args).op_counts()
        assert got == counts, (prog, rec)
        if not rec:
            assert not set(got) & HIGH_LEVEL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MODELS)
def test_model_numerics(name, backend):
    """The recognised forward and value_and_grad (w.r.t. parameters and input) equal JAX."""
    for prog, (fn, args) in _programs(name).items():
        got, want = rlx_jax.jit(fn, backend=backend)(*args), jax.jit(fn)(*args)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-4, rtol=2e-4,
                                       err_msg=prog)
