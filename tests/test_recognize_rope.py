"""RoPE as LLaMA-style JAX code writes it, recognised as Rope / RopeBackward
(passes/pattern_rope.py): each form (full-width tables with rotate_half, half-width tables,
the interleaved pairs; x as [B, S, H, D] and [B, H, S, D]; tables passed in or computed in the
program from arange(S) * inv_freq) becomes one node, its jax.grad one RopeBackward, with exact
op counts; near misses stay primitives; values equal jax.jit and jax.grad on every backend; MLX
lowers the frequency form with mx.fast.rope; a LLaMA-style attention block end to end."""
import importlib.util
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import nn
from rlx_jax.passes.recognize import recognize

R = np.random.RandomState(0)
B, S, H, D = 2, 6, 3, 8
XB = R.randn(B, H, S, D).astype(np.float32)         # heads before the sequence
XS = R.randn(B, S, H, D).astype(np.float32)         # the sequence before the heads
CF, SF = (R.randn(S, D).astype(np.float32) for _ in "cs")           # any tables: exactness
CH, SH = (R.randn(S, D // 2).astype(np.float32) for _ in "cs")


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotate_half_split(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def full(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def half(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def pairs(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)


def tables(n, d, twice, pos=None, einsum=False):
    """LLaMA's tables: inv_freq = 1 / base**(arange(0, D, 2) / D), freqs = pos ⊗ inv_freq."""
    inv = 1.0 / (10000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    pos = jnp.arange(n).astype(jnp.float32) if pos is None else pos
    f = jnp.einsum("i,j->ij", pos, inv) if einsum else pos[:, None] * inv[None, :]
    f = jnp.concatenate([f, f], axis=-1) if twice else f
    return jnp.cos(f), jnp.sin(f)


def hf_flax_llama(x, position_ids):
    """transformers' FlaxLlamaRotaryEmbedding: a [P, 1, 2D] sin|cos table gathered by
    position_ids [B, S], split, then apply_rotary_pos_emb's x * cos + rotate_half(x) * sin."""
    inv = 1.0 / (10000 ** (np.arange(0, D, 2) / D))
    emb = np.concatenate([np.outer(np.arange(16), inv)] * 2, -1).astype(np.float32)
    sincos = jnp.asarray(np.concatenate([np.sin(emb)[:, None], np.cos(emb)[:, None]], -1))
    sin_pos, cos_pos = jnp.split(sincos[position_ids], 2, axis=-1)
    return x * cos_pos + rotate_half(x) * sin_pos


def in_program(form, twice, bshd, **kw):
    def fn(x):
        c, s = tables(S, D, twice, **kw)
        return form(x, c[:, None], s[:, None]) if bshd else form(x, c, s)
    return fn


FREQ = {"Binary": 5, "Iota": 1, "Rope": 1}          # inv_freq's own ops stay primitives
FORMS = {   # name: (fn, args, op counts after recognition; None: left alone)
    "full_bhsd": (full, (XB, CF, SF), {"Rope": 1}),
    "full_bhsd_4d_tables": (full, (XB, CF[None, None], SF[None, None]), {"Rope": 1, "Reshape": 2}),
    "full_bshd": (lambda x, c, s: full(x, c[:, None], s[:, None]), (XS, CF, SF), {"Rope": 1}),
    "full_jnp_split": (lambda x, c, s: x * c + rotate_half_split(x) * s, (XB, CF, SF),
                       {"Rope": 1}),
    "full_bshd_one_token": (lambda x, c, s: full(x, c[:1, None], s[:1, None]),   # decoding
                            (XS[:, :1], CF, SF), {"Rope": 1, "Slice": 2}),
    "half_bhsd": (half, (XB, CH, SH), {"Rope": 1}),
    "half_bshd": (lambda x, c, s: half(x, c[:, None], s[:, None]), (XS, CH, SH), {"Rope": 1}),
    "pairs_bhsd": (pairs, (XB, CH, SH), {"Rope": 1}),
    "pairs_bshd": (lambda x, c, s: pairs(x, c[:, None], s[:, None]), (XS, CH, SH), {"Rope": 1}),
    "full_freqs_bshd": (in_program(full, True, True), (XS,), FREQ),
    "full_freqs_bhsd_einsum": (in_program(full, True, False, einsum=True), (XB,), FREQ),
    "half_freqs_bshd": (in_program(half, False, True), (XS,), FREQ),
    "pairs_freqs_bhsd": (in_program(pairs, False, False), (XB,), FREQ),
    # positions passed in: the tables stay computed, Rope takes them
    "full_positions_in": (lambda x, p: in_program(full, True, True, pos=p)(x),
                          (XS, np.arange(S, dtype=np.float32) + 3),
                          {"Activation": 2, "Binary": 6, "Concat": 1, "Expand": 2, "Iota": 1,
                           "Rope": 1}),
    # tables with rows per batch element [B, S, 1, D]; HF's flax LLaMA gathers them from its
    # sin|cos table by position_ids and splits them
    "full_bshd_rows_per_batch": (full, (XS, np.repeat(CF[None, :, None], B, 0),
                                        np.repeat(SF[None, :, None], B, 0)), {"Rope": 1}),
    "pairs_bshd_rows_per_batch": (pairs, (XS, np.repeat(CH[None, :, None], B, 0),
                                          np.repeat(SH[None, :, None], B, 0)), {"Rope": 1}),
    "hf_flax_llama": (hf_flax_llama, (XS, np.tile(np.arange(S, dtype=np.int32), (B, 1))),
                      {"Gather": 1, "Rope": 1, "Slice": 2,     # and the index's clamp:
                       "Binary": 1, "Compare": 1, "Expand": 1, "Where": 1}),
    # near misses: the sign of sin, halves swapped without the negation, a pair order that is
    # no rotation, tables that broadcast x to a larger shape
    "wrong_sign": (lambda x, c, s: x * c - rotate_half(x) * s, (XB, CF, SF), None),
    "swap_no_neg": (lambda x, c, s: x * c + jnp.concatenate(
        [x[..., D // 2:], x[..., :D // 2]], -1) * s, (XB, CF, SF), None),
    "pairs_no_rotation": (lambda x, c, s: jnp.stack(
        [x[..., ::2] * c - x[..., 1::2] * s, x[..., ::2] * s - x[..., 1::2] * c],
        -1).reshape(x.shape), (XB, CH, SH), None),
    "tables_broadcast_x": (full, (XB[0, 0], CF[None].repeat(2, 0), SF[None].repeat(2, 0)),
                           None),
}


def bf16_tables(x):
    """x in bfloat16, the tables computed in float32 and cast to x's dtype (mixed-precision
    code): Rope on the cast tables (the frequency form is float32 only)."""
    return full(x, *(t[:, None].astype(x.dtype) for t in tables(S, D, True)))


def eqx_rope(bshd, theta=10000.0):
    """equinox's RotaryPositionalEmbedding on each head of a batch, as attention code maps it
    (its tables are constants computed at trace time)."""
    import equinox as eqx
    rope = eqx.nn.RotaryPositionalEmbedding(D, theta=theta)
    per_sequence = jax.vmap(rope, in_axes=1, out_axes=1) if bshd else jax.vmap(rope)
    return lambda x: jax.vmap(per_sequence)(x)


if importlib.util.find_spec("equinox"):      # the frequency form
    FORMS.update({"eqx_bshd": (eqx_rope(True), (XS,), {"Rope": 1}),
                  "eqx_bhsd": (eqx_rope(False), (XB,), {"Rope": 1})})


def test_equinox_tables_of_another_theta():
    """equinox caches its tables per (size, dtype) whatever the theta: tables baked in with
    another theta than 10000 are not taken for theta 10000's (BSHD: left alone; BHSD: the
    plain formula, Rope on the tables), and values equal JAX's."""
    eqx = pytest.importorskip("equinox")
    cache = sys.modules[eqx.nn.RotaryPositionalEmbedding.__module__].internal_rope_embedding_cache
    saved = dict(cache)
    cache.clear()
    try:
        for bshd, x, want in ((True, XS, None), (False, XB, {"Rope": 1, "Expand": 2,
                                                              "Reshape": 2})):
            fn = eqx_rope(bshd, theta=500.0)
            got = _counts(fn, (x,))
            assert got == (want or rlx_jax.trace(fn, x).op_counts()), got
            np.testing.assert_allclose(_np(rlx_jax.jit(fn, backend="xla")(x)), jax.jit(fn)(x),
                                       rtol=1e-6, atol=1e-6)
    finally:
        cache.clear()
        cache.update(saved)


def _counts(fn, args, **kw):
    return recognize(rlx_jax.trace(fn, *args, **kw)).op_counts()


def _loss(fn):
    return lambda x, *a: jnp.sum(jnp.tanh(fn(x, *a)) * jnp.arange(x.shape[-1]))


def test_every_form_and_near_miss():
    """Given: each form (forward, and jax.grad of a loss through it) and each near miss
       Result: the forms' exact op counts, one RopeBackward in the gradient (none of the rotate
               ops left: no Concat, Pad or Slice), the near misses' graphs unchanged"""
    for name, (fn, args, want) in FORMS.items():
        plain = rlx_jax.trace(fn, *args).op_counts()
        assert _counts(fn, args) == (want or plain), name
        grad = _counts(jax.grad(_loss(fn)), args)
        if want is None:
            assert "Rope" not in grad and "RopeBackward" not in grad, name
            continue
        assert grad["Rope"] == grad["RopeBackward"] == 1, (name, grad)
        assert not {"Concat", "Pad", "Slice"} & set(grad) - set(want), (name, grad)
    xb = XS.astype(jnp.bfloat16)
    assert _counts(bf16_tables, (xb,))["Rope"] == 1
    grad = _counts(jax.grad(lambda x: jnp.sum(bf16_tables(x).astype(jnp.float32) ** 2)), (xb,))
    assert grad["Rope"] == grad["RopeBackward"] == 1, grad


def _np(v):
    return np.asarray(v)


@pytest.mark.parametrize("name", [k for k, v in FORMS.items() if v[2] is not None])
def test_form_equals_jax_forward_and_grad(name, backend):
    fn, args, _ = FORMS[name]
    jf = rlx_jax.jit(fn, backend=backend)
    np.testing.assert_allclose(_np(jf(*args)), jax.jit(fn)(*args), rtol=1e-5, atol=1e-5)
    grad = jax.grad(_loss(fn))
    jg = rlx_jax.jit(grad, backend=backend)
    counts = jg.lower(*args).op_counts()
    assert counts.get("Rope", 0) == (backend != "xla"), counts            # xla decomposes it
    assert counts.get("RopeBackward", 0) == (backend != "xla"), counts
    np.testing.assert_allclose(_np(jg(*args)), jax.jit(grad)(*args), rtol=1e-5, atol=1e-5)


@pytest.fixture
def fast_rope_calls(monkeypatch):
    """The calls of mx.fast.rope the MLX rules make while a program is lowered."""
    mx = pytest.importorskip("mlx.core")
    calls, orig = [], mx.fast.rope

    def spy(a, dims, **kw):
        calls.append(kw["scale"])
        return orig(a, dims, **kw)
    monkeypatch.setattr(mx.fast, "rope", spy)
    return calls


@pytest.mark.parametrize("name, used", [("full_freqs_bshd", True), ("pairs_freqs_bhsd", True),
                                        ("eqx_bshd", True), ("full_bshd", False),
                                        ("full_positions_in", False)])
def test_mlx_lowers_the_frequency_form_with_fast_rope(name, used, fast_rope_calls):
    """The frequency form (tables from arange(S) * inv_freq) runs mx.fast.rope forward (scale
    1) and backward (scale -1, the negated angles); runtime tables keep the composition."""
    fn, args, _ = FORMS[name]
    jg = rlx_jax.jit(jax.value_and_grad(_loss(fn)), backend="mlx")
    (val, g), (want_val, want) = jg(*args), jax.jit(jax.value_and_grad(_loss(fn)))(*args)
    np.testing.assert_allclose(_np(val), want_val, rtol=1e-5)
    np.testing.assert_allclose(_np(g), want, rtol=1e-5, atol=1e-5)
    assert sorted(fast_rope_calls) == ([-1.0, 1.0] if used else [])


def test_core_ml_mil_ops_of_each_table_form():
    """Given: Rope of each table form on coreml
       Result: rotate-half 8 MIL ops (split, 4 mul, sub, add, concat), full width 6 (split,
               concat, 3 mul (the negation one), add), the pairs 12 (a reshape on each side,
               the tables' expand_dims to [S, D/2, 1]) and x[B, S, H, D] the tables'
               expand_dims to [S, 1, W]"""
    want = {"half_bhsd": {"split": 1, "mul": 4, "sub": 1, "add": 1, "concat": 1},
            "full_bhsd": {"split": 1, "mul": 3, "add": 1, "concat": 1},
            "pairs_bhsd": {"split": 1, "mul": 4, "sub": 1, "add": 1, "concat": 1,
                           "reshape": 2, "expand_dims": 2},
            "full_bshd": {"split": 1, "mul": 3, "add": 1, "concat": 1, "expand_dims": 2}}
    for name, counts in want.items():
        fn, args, _ = FORMS[name]
        assert rlx_jax.jit(fn, backend="coreml").lower(*args).op_counts("backend") == counts


def test_nn_rope_variants_equal_the_formulas():
    """rlx_jax.nn.rope with full-width tables, the pairs and x[B, S, H, D] equals the written
    formulas and their gradients (the kind's own semantics, nn/rotary.py)."""
    cases = [(dict(), full, (XB, CF, SF)), (dict(traditional=True), pairs, (XB, CH, SH)),
             (dict(seq_axis=-3), lambda x, c, s: half(x, c[:, None], s[:, None]),
              (XS, CH, SH))]
    for kw, form, args in cases:
        mine = jax.jit(lambda x, c, s, kw=kw: nn.rope(x, c, s, **kw))
        np.testing.assert_array_equal(mine(*args), jax.jit(form)(*args))
        np.testing.assert_allclose(jax.jit(jax.grad(_loss(mine)))(*args),
                                   jax.jit(jax.grad(_loss(form)))(*args), rtol=1e-5, atol=1e-5)


# ---- a LLaMA-style attention block: q/k rope (tables in the program) + causal attention ----
def _block(p, x):
    b, s, d = x.shape
    q, k, v = ((x @ p[n]).reshape(b, s, 2, d // 2) for n in "qkv")
    cos, sin = tables(s, d // 2, True)
    q, k = (full(t, cos[:, None], sin[:, None]) for t in (q, k))
    a = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, s, d)
    return jnp.mean((x + a @ p["o"]) ** 2)


def test_llama_attention_block(backend):
    """value_and_grad of the block: 2 Rope, 2 RopeBackward, one Attention and
    AttentionBackward, no rotate ops nor cos / sin left (the one Activation is the loss's
    square); values equal jax.jit's."""
    p = {n: R.randn(16, 16).astype(np.float32) * 0.3 for n in "qkvo"}
    x = R.randn(2, S, 16).astype(np.float32)
    step = jax.value_and_grad(_block)
    counts = recognize(rlx_jax.trace(step, p, x)).op_counts()
    assert {k: counts[k] for k in ("Rope", "RopeBackward", "Attention", "AttentionBackward")} \
        == {"Rope": 2, "RopeBackward": 2, "Attention": 1, "AttentionBackward": 1}
    assert not {"Concat", "Pad", "Slice"} & set(counts) and counts["Activation"] == 1, counts
    jf = rlx_jax.jit(step, backend=backend)
    (loss, g), (want_loss, want) = jf(p, x), jax.jit(step)(p, x)
    np.testing.assert_allclose(_np(loss), want_loss, rtol=1e-5)
    for n in p:
        np.testing.assert_allclose(_np(g[n]), want[n], rtol=1e-4, atol=1e-5)


def test_core_ml_builds_the_tables_once():
    """Given: the block's training step on coreml (tables from inv_freq in the program)
       Result: one cos and one sin in the MIL program: the four Rope / RopeBackward nodes on
               the same frequencies share their angles; no slice, pad or concat of the
               rotations' primitives (the kernels' split / concat only)"""
    p = {n: R.randn(16, 16).astype(np.float32) * 0.3 for n in "qkvo"}
    x = R.randn(2, S, 16).astype(np.float32)
    mil = rlx_jax.jit(jax.value_and_grad(_block), backend="coreml").lower(p, x).op_counts(
        "backend")
    assert (mil["cos"], mil["sin"], mil["split"], mil["concat"]) == (1, 1, 4, 4), mil
    assert "pad" not in mil and "slice_by_index" not in mil, mil

