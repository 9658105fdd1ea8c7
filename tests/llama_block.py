"""A LLaMA-style block as flax code writes it: RMSNorm, rotary embeddings (rotate-half, tables
computed in the program), causal attention (jax.nn.dot_product_attention), SwiGLU; bfloat16
activations with float32 parameters, trained with optax.adamw under a warm-up + cosine
schedule. Shared by tests/test_llama_block.py and benchmarks/bench_llama.py."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

D, H, S, V, B = 32, 4, 8, 16, 2
BF16, F32 = jnp.bfloat16, jnp.float32


def rope_tables(s, d, base=10000.0):
    inv = 1.0 / base ** (jnp.arange(0, d, 2, dtype=F32) / d)
    freqs = jnp.arange(s, dtype=F32)[:, None] * inv[None, :]
    emb = jnp.concatenate([freqs, freqs], -1)
    return jnp.cos(emb), jnp.sin(emb)


def rotate_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], -1)


def apply_rope(x, cos, sin):                  # x [B, S, H, hd], tables [S, hd]
    cos, sin = cos[:, None, :].astype(x.dtype), sin[:, None, :].astype(x.dtype)
    return x * cos + rotate_half(x) * sin


def dense(features, name):
    return nn.Dense(features, use_bias=False, dtype=BF16, param_dtype=F32, name=name)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        b, s, _ = x.shape
        hd = D // H
        h = nn.RMSNorm(dtype=BF16, param_dtype=F32, name="attn_norm")(x)
        q, k, v = (dense(D, n)(h).reshape(b, s, H, hd) for n in ("q", "k", "v"))
        cos, sin = rope_tables(s, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + dense(D, "o")(a.reshape(b, s, D))
        h = nn.RMSNorm(dtype=BF16, param_dtype=F32, name="mlp_norm")(x)
        return x + dense(D, "down")(jax.nn.silu(dense(2 * D, "gate")(h)) * dense(2 * D, "up")(h))


class LM(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(V, D, dtype=BF16, param_dtype=F32)(tokens)
        x = nn.RMSNorm(dtype=BF16, param_dtype=F32)(Block()(x))
        return nn.Dense(V, dtype=BF16, param_dtype=F32)(x)


def make(batch=B, seq=S, seed=0):
    """(step, args): one training step and its first arguments (params, opt state, tokens,
    labels)."""
    model = LM()
    opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10))
    r = np.random.default_rng(seed)
    tokens = r.integers(0, V, (batch, seq)).astype(np.int32)
    labels = r.integers(0, V, (batch, seq)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(seed), tokens)

    def loss(p, tokens, labels):
        logits = model.apply(p, tokens).astype(F32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def step(p, state, tokens, labels):
        value, grads = jax.value_and_grad(loss)(p, tokens, labels)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value
    return step, (params, opt.init(params), tokens, labels)
