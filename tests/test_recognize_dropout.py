"""Attention with dropout on its weights (flax MultiHeadDotProductAttention, dropout_rate > 0,
deterministic=False): the Attention kind has no dropout, so only the parts that match are
recognised, the softmax of the weights, forward and under jax.grad; the dropout stays
primitives (threefry bits, a compare, a select), and results equal jax.jit's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from .where_ran import COREML_KEY_BITS

fnn = pytest.importorskip("flax.linen")
BACKENDS = [b for b in ("mlx", "coreml") if b in rlx_jax.available_backends()]
HEADS, X = 2, np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)
MODEL = fnn.MultiHeadDotProductAttention(num_heads=HEADS, dropout_rate=0.2, deterministic=False)
PARAMS = MODEL.init({"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}, X, X)
KEY = jax.random.PRNGKey(3)


def forward(p, x, key):
    return MODEL.apply(p, x, x, rngs={"dropout": key})


def grads(p, x, key):
    return jax.grad(lambda p: jnp.sum(forward(p, x, key) ** 2))(p)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [forward, grads], ids=["forward", "grad"])
@COREML_KEY_BITS
def test_dropout_attention_recognises_the_softmax_only(backend, fn):
    counts = rlx_jax.jit(fn, backend=backend).lower(PARAMS, X, KEY).op_counts()
    assert counts.get("Softmax") == 1
    assert not {"Attention", "AttentionBackward"} & set(counts)
    off = rlx_jax.jit(fn, backend=backend, recognize=False).lower(PARAMS, X, KEY).op_counts()
    assert "Softmax" not in off
    got, want = rlx_jax.jit(fn, backend=backend)(PARAMS, X, KEY), jax.jit(fn)(PARAMS, X, KEY)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-5), got, want)
