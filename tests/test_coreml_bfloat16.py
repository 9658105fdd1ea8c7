"""bfloat16 on Core ML, which has no bfloat16 tensors (backends/coreml/passes/bfloat16.py):
by default the ops on bfloat16 values run on the host, each named with the reason, and a
bfloat16 argument read only by casts (a result made by a cast) travels as float32 with no host
op; with the option bfloat16="float32" / "float16" the whole program runs on Core ML, its
results within bfloat16's rounding of jax.jit's and of jax.jit's dtypes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.errors import BadArgumentError

pytestmark = pytest.mark.skipif("coreml" not in rlx_jax.available_backends(),
                                reason="coremltools is not installed")

R = np.random.default_rng(0)
X = jnp.asarray(R.normal(size=(4, 8)), jnp.bfloat16)
W = jnp.asarray(R.normal(size=(8, 8)) * 0.3, jnp.bfloat16)


def mlp(x, w):
    h = jax.nn.gelu(x @ w)
    return (h * 2).sum(-1), h.astype(jnp.float32).mean()


def casts_only(x):
    return x.astype(jnp.float32) * 2, (x.astype(jnp.float32) + 1).astype(jnp.bfloat16)


def _check(fn, args, out, atol):
    want = jax.jit(fn)(*args)
    for o, w in zip(out, want):
        assert o.dtype == w.dtype and o.shape == w.shape
        np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(w, np.float32),
                                   rtol=2 ** -7, atol=atol)


@pytest.mark.host("Core ML has no bfloat16 tensors: the default keeps them on the host")
def test_default_runs_bfloat16_ops_on_the_host_with_the_reason():
    placed = rlx_jax.jit(mlp, backend="coreml").lower(X, W).placement()
    whys = {why for _, why in placed.host_ops()}
    assert placed.host and all("Core ML has no bfloat16 tensors" in w for w in whys), whys
    _check(mlp, (X, W), rlx_jax.jit(mlp, backend="coreml")(X, W), atol=0)


def test_boundary_casts_travel_as_float32_on_the_device():
    jitted = rlx_jax.jit(casts_only, backend="coreml")
    assert jitted.lower(X).placement().device_only
    assert jitted.lower(X).op_counts(level="backend") == {"mul": 1, "add": 1}
    _check(casts_only, (X,), jitted(X), atol=0)           # exact: no rounding but JAX's own


@pytest.mark.parametrize("wider", ["float32", "float16"])
def test_option_computes_bfloat16_in_a_wider_dtype_on_the_device(wider):
    jitted = rlx_jax.jit(mlp, backend="coreml", bfloat16=wider)
    placed = jitted.lower(X, W).placement()
    assert placed.device_only
    bf16 = [(n.kind.name, v in placed.graph.outputs) for n in placed.graph.nodes
            for v in n.outputs if v.dtype == jnp.bfloat16]
    assert bf16 == [("Input", False), ("Input", False), ("Cast", True)], bf16
    _check(mlp, (X, W), jitted(X, W), atol=0.05)     # a few bfloat16 ulps of sums of 8 terms


@pytest.mark.host("a loop over bfloat16 values is left to the host, with its reason")
def test_option_keeps_a_loop_over_bfloat16_on_the_host():
    def loop(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: c * jnp.bfloat16(1.5), x)
    jitted = rlx_jax.jit(loop, backend="coreml", bfloat16="float32")
    placed = jitted.lower(X).placement()
    # the loop (a Scan) and the casts around it, each for its bfloat16 values
    host = [(n.kind.name, "Core ML has no bfloat16 tensors" in why)
            for n, why in placed.host_ops()]
    assert host == [("Cast", True), ("Scan", True), ("Cast", True)], host
    _check(lambda x: (loop(x),), (X,), (jitted(X),), atol=0)


def test_option_is_checked():
    with pytest.raises(BadArgumentError, match="bfloat16 must be one of"):
        rlx_jax.jit(mlp, backend="coreml", bfloat16="bf16")(X, W)
