"""XLA's excess precision for bfloat16 on MLX (passes/excess_precision.py): a float32 Cast of a
bfloat16 elementwise op is the op in float32, as jax.jit computes it on the CPU. Oracle:
jax.jit, bit for bit; the rewritten graph, op by op."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax

pytest.importorskip("mlx.core")
BF16 = jnp.bfloat16
RNG = np.random.default_rng(3)


def _pair(dtype, n=2000):
    return (jnp.asarray(RNG.uniform(-5, 5, n), dtype), jnp.asarray(RNG.uniform(0.5, 5, n), dtype))


def _same(fn, *args):
    compiled = rlx_jax.jit(fn, backend="mlx").lower(*args).compile()
    rlx_jax.testing.assert_ran_on_device(compiled)
    np.testing.assert_array_equal(np.asarray(compiled(*args), np.float32),
                                  np.asarray(jax.jit(fn)(*args), np.float32))
    return compiled.lowered.placement().graph


@pytest.mark.parametrize("op", [jnp.add, jnp.subtract, jnp.multiply, jnp.divide])
def test_a_widened_bfloat16_op_is_the_float32_op(op):
    """Given:  (a op b).astype(float32) of bfloat16 a, b
       Result: jax.jit's values bit for bit: the op computed in float32, not rounded; the
               graph MLX lowers holds the op at float32 and no bfloat16 op"""
    graph = _same(lambda a, b: op(a, b).astype(jnp.float32), *_pair(BF16))
    (node,) = [n for n in graph.nodes if n.kind.name == "Binary"]
    assert node.out.dtype == np.float32


def test_an_op_feeding_another_bfloat16_op_stays_rounded():
    """((a * b) * b).astype(float32): the inner product is rounded to bfloat16 (as XLA
    does), the outer one is not"""
    graph = _same(lambda a, b: ((a * b) * b).astype(jnp.float32), *_pair(BF16))
    assert sorted(str(n.out.dtype) for n in graph.nodes if n.kind.name == "Binary") == \
        ["bfloat16", "float32"]


def test_float16_ops_stay_rounded():
    """float16 ops, which XLA's CPU computes natively, keep their rounding"""
    graph = _same(lambda a, b: (a * b).astype(jnp.float32), *_pair(np.float16))
    (node,) = [n for n in graph.nodes if n.kind.name == "Binary"]
    assert node.out.dtype == np.float16


def test_trapezoid_of_bfloat16_samples_is_jax_s():
    """jnp.trapezoid(y, x) of bfloat16 samples (its float32 sum reads the products): equal
    to jax.jit bit for bit over 20 draws (a product rounded first differed by up to 0.09)"""
    fn = lambda y, x: jnp.trapezoid(y, x, axis=-1)             # noqa: E731
    for _ in range(20):
        y = jnp.asarray(RNG.uniform(-5, 5, (3, 10)), BF16)
        x = jnp.asarray(RNG.uniform(-5, 5, (10,)), BF16)
        _same(fn, y, x)
