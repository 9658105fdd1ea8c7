"""Flexible Core ML programs from symbolic shapes: export_coreml at jax.export's symbolic
ShapeDtypeStructs writes RangeDim / EnumeratedShapes inputs; the package, loaded back, runs in
the MIL executor at several sizes equal to JAX; the executor refuses a shape the description
does not allow, as Core ML does; rlx_jax.jit(backend="coreml", polymorphic_shapes=...) serves
every size with one package when every symbol is bounded."""
import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
from rlx_jax.errors import LegalizationError, RefusalError, ShapeConstraintError
from rlx_jax.symbolic import flexible_reason

from .test_symbolic import BLOCK, PARAMS, _close, _loss


def _feeds(ex, x):
    return dict(zip(ex.input_names, [np.asarray(a) for a in jax.tree.leaves(PARAMS)] + [x]))


def _x(*shape):
    return np.random.RandomState(sum(shape)).randn(*shape).astype(np.float32)


def test_export_a_transformer_block_with_a_ranged_sequence_length(tmp_path):
    t, = jax.export.symbolic_shape("t", constraints=["t <= 512"])
    path = rlx_jax.export_coreml(BLOCK.apply, PARAMS, jax.ShapeDtypeStruct((1, t, 16),
                                                                           jnp.float32),
                                 path=str(tmp_path / "block.mlpackage"), default_sizes={"t": 64})
    spec = ct.utils.load_spec(path)
    x_in = spec.description.input[-1].type.multiArrayType
    assert [(r.lowerBound, r.upperBound) for r in x_in.shapeRange.sizeRanges] == \
        [(1, 1), (1, 512), (16, 16)]
    assert list(x_in.shape) == [1, 64, 16]                   # the default
    ex = MilReferenceExecutor(path)
    # no reshape fixes t: each sized by t infers it (-1; coremltools' folding of the sizes the
    # program computes from the input's shape when one dimension is flexible)
    flexible = [op for op in ex.ops if op.op_type == "reshape" and
                any(not isinstance(d, int) for d in op.outputs[0].shape)]
    assert flexible and all(op.inputs["shape"].val is None or -1 in op.inputs["shape"].val
                            for op in flexible)
    for n in (1, 7, 300):
        out = ex(_feeds(ex, _x(1, n, 16)))
        _close(list(out.values())[0], BLOCK.apply(PARAMS, _x(1, n, 16)), 2e-5)
    with pytest.raises(ShapeConstraintError, match=r"\(1, 600, 16\); its description takes "
                                                   r"range \[1\.\.1, 1\.\.512, 16\.\.16\]"):
        ex(_feeds(ex, _x(1, 600, 16)))


def test_export_with_enumerated_sizes(tmp_path):
    b, t = jax.export.symbolic_shape("b, t")
    sizes = [{"b": 1, "t": 8}, {"b": 2, "t": 16}, {"b": 1, "t": 32}]
    path = rlx_jax.export_coreml(BLOCK.apply, PARAMS, jax.ShapeDtypeStruct((b, t, 16),
                                                                           jnp.float32),
                                 path=str(tmp_path / "enum.mlpackage"), enumerated_sizes=sizes)
    x_in = ct.utils.load_spec(path).description.input[-1].type.multiArrayType
    assert [tuple(s.shape) for s in x_in.enumeratedShapes.shapes] == \
        [(1, 8, 16), (2, 16, 16), (1, 32, 16)]
    ex = MilReferenceExecutor(path)
    # two flexible dimensions: the program reads the input's shape to size its reshapes
    assert any(op.op_type == "shape" for op in ex.ops)
    for s in sizes:
        x = _x(s["b"], s["t"], 16)
        _close(list(ex(_feeds(ex, x)).values())[0], BLOCK.apply(PARAMS, x), 2e-5)
    with pytest.raises(ShapeConstraintError, match=r"takes enumerated"):
        ex(_feeds(ex, _x(1, 9, 16)))


def test_a_flexible_export_needs_bounds_core_ml_can_hold(tmp_path):
    b, t = jax.export.symbolic_shape("b, t", constraints=["t <= 512"])
    with pytest.raises(RefusalError, match="'b' has no upper bound"):
        rlx_jax.export_coreml(BLOCK.apply, PARAMS, jax.ShapeDtypeStruct((b, t, 16),
                                                                        jnp.float32),
                              path=str(tmp_path / "a.mlpackage"))
    b, t = jax.export.symbolic_shape("b, t", constraints=["b * t <= 4096", "b <= 4",
                                                          "t <= 512"])
    with pytest.raises(RefusalError, match=r"'b \* t <= 4096' is not a bound on one symbol"):
        rlx_jax.export_coreml(BLOCK.apply, PARAMS, jax.ShapeDtypeStruct((b, t, 16),
                                                                        jnp.float32),
                              path=str(tmp_path / "b.mlpackage"))


def test_an_op_whose_lowering_needs_sizes_is_refused_by_name(tmp_path):
    def causal(x):
        return jax.nn.dot_product_attention(x, x, x, is_causal=True)
    t, = jax.export.symbolic_shape("t", constraints=["t <= 64"])
    with pytest.raises(LegalizationError, match=r"Attention(.|\n)*test_symbolic_coreml.py"
                                                r"(.|\n)*takes static sizes only"):
        rlx_jax.export_coreml(causal, jax.ShapeDtypeStruct((1, t, 2, 8), jnp.float32),
                              path=str(tmp_path / "c.mlpackage"))


def test_jit_on_coreml_serves_every_bounded_size_with_one_package():
    f = jax.value_and_grad(_loss)
    jf = rlx_jax.jit(f, backend="coreml", polymorphic_shapes=[None, "b, t, 16"],
                     polymorphic_constraints=["b <= 8", "t <= 512"])
    programs = set()
    for b, t in [(1, 7), (2, 33), (4, 128)]:
        x = _x(b, t, 16)
        _close(jf(PARAMS, x), jax.jit(f)(PARAMS, x), 2e-5)
        programs.add(id(jf._cache[jf._key((PARAMS, x), {})[0]]))
    assert len(programs) == 1 and flexible_reason(jf, PARAMS, x) is None
    unbounded = rlx_jax.jit(f, backend="coreml", polymorphic_shapes=[None, "b, t, 16"])
    _close(unbounded(PARAMS, _x(1, 5, 16)), jax.jit(f)(PARAMS, _x(1, 5, 16)), 2e-5)
    assert "'b' has no upper bound" in flexible_reason(unbounded, PARAMS, _x(1, 5, 16))


def test_export_a_cnn_with_a_flexible_batch(tmp_path):
    from .test_symbolic import CNN
    cnn = CNN()
    params = cnn.init(jax.random.PRNGKey(1), jnp.ones((1, 8, 8, 3)))
    b, = jax.export.symbolic_shape("b", constraints=["b <= 16"])
    path = rlx_jax.export_coreml(cnn.apply, params, jax.ShapeDtypeStruct((b, 8, 8, 3),
                                                                         jnp.float32),
                                 path=str(tmp_path / "cnn.mlpackage"))
    x_in = ct.utils.load_spec(path).description.input[-1].type.multiArrayType
    assert [(r.lowerBound, r.upperBound) for r in x_in.shapeRange.sizeRanges] == \
        [(1, 16), (8, 8), (8, 8), (3, 3)]
    ex = MilReferenceExecutor(path)
    assert "conv" in {op.op_type for op in ex.ops}
    for n in (1, 5, 16):
        x = _x(n, 8, 8, 3)
        feeds = dict(zip(ex.input_names, [np.asarray(a) for a in jax.tree.leaves(params)] + [x]))
        _close(list(ex(feeds).values())[0], cnn.apply(params, x), 2e-5)


SMALL = {   # program, what serves its sizes on Core ML (None: one flexible package)
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), None),
    "cumsum_concat": (lambda x: jnp.concatenate([jnp.cumsum(x, axis=1), x], axis=0), None),
    "argmax": (lambda x: jnp.argmax(x, axis=-1), "Core ML's lowering of ArgMax takes static"),
    "reverse": (lambda x: x[:, ::-1], "legalization needs sizes"),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_jit_on_coreml_says_why_a_size_gets_its_own_package(name):
    fn, reason = SMALL[name]
    jf = rlx_jax.jit(fn, backend="coreml", polymorphic_shapes="b, t",
                     polymorphic_constraints=["b <= 8", "t <= 64"])
    for shape in [(2, 5), (3, 9)]:
        x = _x(*shape)
        _close(jf(x), jax.jit(fn)(x), 1e-5)
    assert jf.trace_count == 1
    got = flexible_reason(jf, x)
    assert (got is None) if reason is None else (reason in got)
