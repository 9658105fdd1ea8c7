"""Symbolic shapes (rlx_jax.jit(polymorphic_shapes=...), Jitted.lower at jax.export's symbolic
ShapeDtypeStructs): one trace serves every size, each equal to jax.jit at that size; calls that
do not fit the shapes or their constraints are refused before anything runs."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.errors import BadArgumentError, ShapeConstraintError, SymbolicShapeError
from rlx_jax.ir.instantiate import is_symbolic


class Block(nn.Module):
    """A pre-norm transformer encoder block."""

    @nn.compact
    def __call__(self, x):
        h = nn.SelfAttention(num_heads=2, qkv_features=16)(nn.LayerNorm()(x))
        x = x + h
        h = nn.Dense(16)(nn.gelu(nn.Dense(32)(nn.LayerNorm()(x))))
        return x + h


BLOCK = Block()
PARAMS = BLOCK.init(jax.random.PRNGKey(0), jnp.ones((1, 4, 16)))


def _loss(p, x):
    return jnp.mean(BLOCK.apply(p, x) ** 2)


def _close(got, want, tol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def test_transformer_value_and_grad_traced_once_for_every_size(backend):
    f = jax.value_and_grad(_loss)
    jf = rlx_jax.jit(f, backend=backend, polymorphic_shapes=[None, "b, t, 16"])
    for b, t in [(1, 7), (2, 33), (4, 128)]:
        x = np.random.RandomState(b * t).randn(b, t, 16).astype(np.float32)
        _close(jf(PARAMS, x), jax.jit(f)(PARAMS, x), 2e-5)
    assert jf.trace_count == 1


def test_the_traced_ir_is_symbolic_and_instantiated_per_size():
    f = rlx_jax.jit(BLOCK.apply, backend="xla", polymorphic_shapes=[None, "b, t, 16"])
    x = np.ones((2, 5, 16), np.float32)
    lowered = f.lower(PARAMS, x)
    assert not is_symbolic(lowered.graph) and lowered.graph.inputs[-1].shape == (2, 5, 16)
    b, t = jax.export.symbolic_shape("b, t")
    sym = f.lower(PARAMS, jax.ShapeDtypeStruct((b, t, 16), jnp.float32))
    assert is_symbolic(sym.graph) and sym.symbols == ["b", "t"]
    assert "f32[b,t,16]" in sym.as_text() and "f32[b,2,t,t]" in sym.as_text()
    at = sym.instantiate(b=3, t=4)
    assert at.graph.inputs[-1].shape == (3, 4, 16)
    run = sym.compile()
    for shape in [(1, 3, 16), (3, 9, 16)]:
        x = np.random.RandomState(0).randn(*shape).astype(np.float32)
        _close(run(PARAMS, x), BLOCK.apply(PARAMS, x), 1e-5)


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(10)(x)


def test_cnn_with_a_symbolic_batch(backend):
    cnn = CNN()
    params = cnn.init(jax.random.PRNGKey(1), jnp.ones((1, 8, 8, 3)))
    jf = rlx_jax.jit(cnn.apply, backend=backend, polymorphic_shapes=[None, "b, 8, 8, 3"])
    for b in (1, 3, 8):
        x = np.random.RandomState(b).randn(b, 8, 8, 3).astype(np.float32)
        _close(jf(params, x), cnn.apply(params, x), 1e-5)
    assert jf.trace_count == 1


def test_scan_over_a_symbolic_length(backend):
    def f(xs):
        return jax.lax.scan(lambda c, x: (c * 0.5 + x, jnp.sin(c)), jnp.zeros(xs.shape[1:]), xs)
    jf = rlx_jax.jit(f, backend=backend, polymorphic_shapes="n, 3")
    for n in (1, 6, 40):
        xs = np.random.RandomState(n).randn(n, 3).astype(np.float32)
        _close(jf(xs), jax.jit(f)(xs), 1e-5)
    assert jf.trace_count == 1


def test_mean_over_a_symbolic_axis_divides_by_its_size():
    f = lambda x: (jnp.mean(x, axis=1), x.shape[1] * x)      # noqa: E731
    jf = rlx_jax.jit(f, backend="xla", polymorphic_shapes="b, t")
    for shape in [(2, 3), (1, 10)]:
        x = np.random.RandomState(0).randn(*shape).astype(np.float32)
        _close(jf(x), f(x), 1e-6)


def _add(x, y):
    return x * 2 + y


def test_a_size_breaking_a_constraint_is_refused_before_running():
    f = rlx_jax.jit(_add, backend="xla", polymorphic_shapes=["b, t", "b, t"],
                    polymorphic_constraints=["t <= 512"])
    np.testing.assert_allclose(f(np.ones((2, 512)), np.ones((2, 512))), 3.0)
    with pytest.raises(ShapeConstraintError, match=r"'t <= 512' with t = 600 "
                                                   r"\(from args\[0\]\.shape\[1\]\)"):
        f(np.ones((2, 600)), np.ones((2, 600)))


def test_arguments_disagreeing_on_a_symbol_are_refused():
    f = rlx_jax.jit(_add, backend="xla", polymorphic_shapes=["b, t", "b, t"])
    with pytest.raises(ShapeConstraintError,
                       match=r"'b' is 2 in args\[0\]\.shape\[0\] but 3 in args\[1\]\.shape\[0\]"):
        f(np.ones((2, 5)), np.ones((3, 5)))
    with pytest.raises(ShapeConstraintError, match=r"rank 3; the function was traced for rank 2"):
        f(np.ones((2, 5, 1)), np.ones((2, 5)))
    with pytest.raises(ShapeConstraintError, match=r"'b, 5' in dimension 1: different size 5 "
                                                   r"for known dimension; like=\(2, 4\)"):
        rlx_jax.jit(_add, backend="xla", polymorphic_shapes=["b, 5", "b, 5"])(
            np.ones((2, 5)), np.ones((2, 4)))
    assert f.trace_count == 0


def test_a_relation_jax_cannot_prove_is_refused_at_trace_naming_the_line():
    def halves(x):
        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)
    f = rlx_jax.jit(halves, backend="xla", polymorphic_shapes="b, t")
    with pytest.raises(SymbolicShapeError, match=r"reshape of f32\[b,t\] .* needs b\*t == "
                                                 r"2\*b\*floordiv\(t, 2\)(.|\n)*test_symbolic"):
        f(np.ones((2, 6), np.float32))
    # declared even, it holds for every size
    g = rlx_jax.jit(halves, backend="xla", polymorphic_shapes="b, 2*k")
    _close(g(np.ones((2, 6), np.float32)), halves(np.ones((2, 6), np.float32)), 0)
    with pytest.raises(ShapeConstraintError,
                       match=r"shape\[1\] is 7, and '2\*k' is not 7 for any whole k"):
        g(np.ones((2, 7), np.float32))


def test_an_undecidable_comparison_names_the_users_line():
    def branchy(x):
        return x[:, :3] if x.shape[1] > 3 else x
    f = rlx_jax.jit(branchy, backend="xla", polymorphic_shapes="b, t")
    with pytest.raises(SymbolicShapeError, match=r"branchy \(test_symbolic.py:\d+\).*'t' > '3'"):
        f(np.ones((2, 6), np.float32))
    g = rlx_jax.jit(branchy, backend="xla", polymorphic_shapes="b, t",
                    polymorphic_constraints=["t >= 4"])
    _close(g(np.ones((2, 6), np.float32)), branchy(np.ones((2, 6), np.float32)), 0)


def test_bad_polymorphic_options_are_refused():
    with pytest.raises(BadArgumentError, match="polymorphic_shapes"):
        rlx_jax.jit(_add, backend="xla", polymorphic_shapes=3)
    f = rlx_jax.jit(_add, backend="xla", polymorphic_shapes=["b"])
    with pytest.raises(BadArgumentError, match="1 entries for 2 positional arguments"):
        f(np.ones(2), np.ones(2))


def test_shape_as_value_of_a_symbolic_shape(backend):
    """JAX's test_shape_as_value_handles_polymorphic_shapes, through polymorphic_shapes."""
    def f(x):
        return jax.lax.shape_as_value(x.shape)
    jf = rlx_jax.jit(f, backend=backend, polymorphic_shapes="a, b")
    for shape in [(1, 2), (3, 4)]:
        got = jf(np.ones(shape, np.float32))
        np.testing.assert_array_equal(got, np.asarray(shape))
        assert got.dtype == f(np.ones(shape, np.float32)).dtype
    assert jf.trace_count == 1


def test_auto_backend_and_clear_cache():
    """backend="auto" picks a backend per size's program; clear_cache forgets the symbolic
    trace too (the next call traces again)."""
    def f(x):
        return jnp.sin(x) * x.shape[0]
    jf = rlx_jax.jit(f, backend="auto", polymorphic_shapes="n")
    for n in (3, 5):
        _close(jf(np.ones(n, np.float32)), f(np.ones(n, np.float32)), 1e-6)
    assert jf.trace_count == 1
    jf.clear_cache()
    _close(jf(np.ones(4, np.float32)), f(np.ones(4, np.float32)), 1e-6)
    assert jf.trace_count == 2
