"""Core ML rank canonicalisation (backends/coreml/passes/rank_canon.py), against JAX on CPU: programs
that JAX stages through values of rank 6 or 7 whose unit axes or alike runs of axes merge away
(a ViT's class token tiled over the batch and concatenated with the patches, and its
gradient; broadcasts, reductions, transposes, slices, pads, scans, sorts at rank 6 and 7) run
on Core ML, and their MIL programs hold no value above rank 5; what truly needs rank 6 is
still refused with a LoweringError."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax import errors
from rlx_jax.backends.coreml.passes.rank import lower_rank

R = np.random.RandomState(0)
S6 = (2, 1, 3, 1, 2, 4)          # rank 6, unit axes: canonical rank 3


def f32(*shape):
    return R.uniform(-2, 2, shape).astype(np.float32)


def _vit_tokens(cls, patches):
    return jnp.concatenate([jnp.tile(cls, (patches.shape[0], 1, 1)), patches], axis=1)


def _vit_loss(cls, patches):
    return jnp.sum(jnp.sin(_vit_tokens(cls, patches)) * jnp.arange(5.0)[:, None])


def _at6(fn):
    """fn applied to x:f32[48] seen as f32[2,1,3,1,2,4]; the result flattened back."""
    return lambda x: fn(x.reshape(S6)).reshape(-1)


CASES = {   # name -> (function, arguments, whether its gradient is checked too)
    "vit_cls_tile": (lambda c: jnp.tile(c, (2, 1, 1)), (f32(1, 1, 32),), True),
    "vit_cls_concat": (_vit_tokens, (f32(1, 1, 32), f32(2, 4, 32)), True),
    "vit_cls_concat_grad": (jax.grad(_vit_loss, argnums=(0, 1)),
                            (f32(1, 1, 32), f32(2, 4, 32)), False),
    "broadcast6_unit": (lambda a: jnp.broadcast_to(a.reshape(2, 1, 1, 1, 1, 32),
                                                   (2, 3, 1, 1, 1, 32)).sum(1), (f32(2, 32),),
                        True),
    "broadcast7_unit": (lambda a: jnp.broadcast_to(a[:, None, None, None, None, None, :],
                                                   (2, 1, 3, 1, 1, 1, 32)).reshape(6, 32),
                        (f32(2, 32),), True),
    "broadcast7_two_axes": (lambda a: jnp.broadcast_to(
        a.reshape(2, 1, 1, 3, 1, 1, 4), (2, 5, 1, 3, 1, 2, 4)).reshape(10, 3, 8),
        (f32(2, 3, 4),), True),
    "elementwise6_broadcast": (lambda a, b: (a.reshape(2, 1, 1, 1, 1, 32) * b.reshape(
        1, 1, 1, 1, 1, 32) + 1.0).reshape(2, 32), (f32(2, 32), f32(32)), True),
    "elementwise6_no_units": (lambda a: jnp.sum(jnp.tanh(a.reshape(2, 2, 2, 2, 2, 3)) * 2,
                                                axis=(1, 3)), (f32(96),), True),
    "where6": (_at6(lambda x: jnp.where(x > 0, x, 0.5 * x)), (f32(48),), True),
    "transpose6": (lambda a: a.reshape(2, 3, 1, 2, 1, 4).transpose(1, 0, 2, 3, 4, 5)
                   .reshape(3, 16), (f32(2, 3, 8),), True),
    "slice6": (_at6(lambda x: x[:, :, 1:, :, :, :3]), (f32(48),), True),
    "pad6": (_at6(lambda x: jnp.pad(x, ((0, 0), (0, 0), (1, 2), (0, 0), (0, 0), (0, 0)))),
             (f32(48),), True),
    "reverse6": (_at6(lambda x: x[:, :, ::-1, :, ::-1, ::-1]), (f32(48),), True),
    "cumsum6": (_at6(lambda x: jnp.cumsum(x, axis=2)), (f32(48),), True),
    "argmax6": (_at6(lambda x: jnp.argmax(x, axis=4)), (f32(48),), False),
    "sort6": (_at6(lambda x: jnp.sort(x, axis=5)), (f32(48),), False),   # grad: a scatter
    "concat6": (lambda a, b: jnp.concatenate([a.reshape(S6), b.reshape(S6)], axis=2)
                .reshape(12, 8), (f32(48), f32(48)), True),
    "iota_constant6": (_at6(lambda x: x + lax.broadcasted_iota(jnp.int32, S6, 2)
                            .astype(jnp.float32) * np.arange(48.0, dtype=np.float32)
                            .reshape(S6)), (f32(48),), True),
}


def _lowered(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rlx_jax.jit(fn, backend="coreml").lower(*args)


def ir_max_rank(graph):
    return max(v.ndim for n in graph.walk() for v in n.outputs)


def mil_max_rank(lowered):
    """The highest rank of any value in the Core ML (MIL) program of `lowered`."""
    prog = lowered.backend.build_program(lowered.legalized).program.functions["main"]

    def ops(operations):
        for op in operations:
            yield op
            for block in op.blocks:
                yield from ops(block.operations)
    ranks = [len(v.shape) for v in prog.inputs.values()]
    ranks += [len(v.shape) for op in ops(prog.operations) for v in op.outputs]
    return max(ranks)


def _check(fn, args):
    want = jax.jit(fn)(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = rlx_jax.jit(fn, backend="coreml")(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def _weighted(fn, nargs):
    """The gradient, with respect to its `nargs` arguments, of a weighted sum of fn's result
    (weighted so that the gradient is not uniform)."""
    def loss(*args):
        y = fn(*args)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape)))
    return jax.grad(loss, argnums=tuple(range(nargs)))


@pytest.mark.parametrize("name", list(CASES))
def test_rank_canonicalised_program_matches_jax(name):
    """Given: a program JAX stages through rank > 5 where unit or alike axes merge away.
    Result: it runs on Core ML, equal to JAX; its traced IR has a value above rank 5 and the
    graph legalized for Core ML (rank rewritten) none; its MIL program holds none either."""
    fn, args, grad = CASES[name]
    lowered = _lowered(fn, args)
    assert ir_max_rank(lowered.graph) > 5          # traced
    assert ir_max_rank(lowered.legalized) <= 5     # legalized for Core ML (rank rewritten)
    assert mil_max_rank(lowered) <= 5
    _check(fn, args)
    if grad:
        g = _weighted(fn, len(args))
        assert mil_max_rank(_lowered(g, args)) <= 5
        _check(g, args)


def test_vit_cls_tile_is_one_broadcast():
    """Given: jnp.tile(cls: f32[1,1,32], (2,1,1)) (JAX: Expand to f32[2,1,1,1,1,32], Reshape).
    Result: Reshape to f32[32], Expand to f32[2,32], Reshape to f32[2,1,32]."""
    graph = lower_rank(_lowered(lambda c: jnp.tile(c, (2, 1, 1)), (f32(1, 1, 32),)).legalized)
    body = [(n.kind.name, n.out.shape) for n in graph.nodes if n.kind.name != "Input"]
    assert body == [("Reshape", (32,)), ("Expand", (2, 32)), ("Reshape", (2, 1, 32))]


@pytest.mark.host("rank-6 values: above Core ML's rank limit of 5 (under test)")
def test_rank6_inputs_are_refused():
    """Given: an elementwise add of two f32[2,2,2,2,2,2] arguments (model inputs of rank 6).
    Result: with fallback="error", a LegalizationError naming rank 6; by default the add runs
    on the host, equal to JAX."""
    x = f32(2, 2, 2, 2, 2, 2)
    with pytest.raises(errors.LegalizationError, match=r"rank 6 > 5"):
        rlx_jax.jit(lambda a, b: a + b, backend="coreml", fallback="error")(x, x)
    _check(lambda a, b: a + b, (x, x))


@pytest.mark.host("rank-6 values: above Core ML's rank limit of 5 (under test)")
def test_interleaved_rank6_outer_product_is_refused():
    """Given: an outer product of f32[2,1,2,1,2,1] and f32[1,2,1,2,1,2] (broadcast axes of the
    two operands alternate: no two adjacent axes merge, the canonical rank is 6).
    Result: with fallback="error", a LegalizationError naming rank 6; by default the product
    runs on the host, equal to JAX."""
    def f(a, b):
        return (a.reshape(2, 1, 2, 1, 2, 1) * b.reshape(1, 2, 1, 2, 1, 2)).reshape(64)
    with pytest.raises(errors.LegalizationError, match=r"rank 6 > 5"):
        rlx_jax.jit(f, backend="coreml", fallback="error")(f32(8), f32(8))
    _check(f, (f32(8), f32(8)))
