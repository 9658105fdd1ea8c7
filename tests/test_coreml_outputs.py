"""Core ML model outputs: each output is the result of the op that computes it, renamed to the
output's name (as coremltools' frontends name outputs), and an `identity` is made only where
MIL needs one: a function input returned as it is, one value returned as two outputs, a nested
block returning a value it did not compute. Names, values and saved packages stay as they
were. Runs everywhere: on Linux the saved package is executed by the MIL reference executor."""
import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
from rlx_jax.backends.coreml.package.runtime import coreml_runtime_available

R = np.random.RandomState(0)
X = R.uniform(-2, 2, (2, 3)).astype(np.float32)
W = R.uniform(-2, 2, (3, 4)).astype(np.float32)
M = np.array([True, False, True])


def program(fn, *args, **options):
    """The built MIL program (MilProgram) of `fn` on Core ML."""
    lowered = rlx_jax.jit(fn, backend="coreml", **options).lower(*args)
    return lowered.backend.build_program(lowered.legalized, **options)


def op_list(operations):
    """Non-const op types in program order; a nested block's ops as a list after its op."""
    out = []
    for op in operations:
        if op.op_type == "const":
            continue
        out.append(op.op_type)
        out.extend(op_list(b.operations) for b in op.blocks)
    return out


def main(prog):
    return prog.program.functions["main"]


def made_by(prog):
    """{output name: the op type that makes it ("input" for a function input)}."""
    return {v.name: v.op.op_type if v.op is not None else "input" for v in main(prog).outputs}


def equals_jax(fn, *args, **options):
    got = rlx_jax.jit(fn, backend="coreml", **options)(*args)
    want = jax.jit(fn)(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)   # exact for ints and bools


def _twice(x):
    y = x * 2
    return y, y


def _constant_and_its_use(x):
    c = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    return c, c * x[0]


def _constant_twice(x):
    c = jnp.array([1.0, 2.0], jnp.float32)
    return c, c, x + 1


def _cond_passes_operand(x):
    return lax.cond(x.sum() > 0, lambda a: a, lambda a: a * 2, x)


def _scan_carry_as_y(x):
    return lax.scan(lambda c, r: (c + r, c), jnp.zeros(3, jnp.float32), x)


# (name, function, arguments, op list of main, {output name: op type that makes it})
NO_IDENTITY = [
    ("x*2+1", lambda x: x * 2 + 1, (X,), ["mul", "add"], {"output": "add"}),
    ("tanh_matmul", lambda x, w: jnp.tanh(x @ w), (X, W), ["matmul", "tanh"],
     {"output": "tanh"}),
    ("bool_result", lambda x: x > 0, (X,), ["greater", "cast"], {"output": "cast"}),
    ("scalar_result", jnp.sum, (X,), ["reduce_sum", "reshape"], {"output": "reshape"}),
    ("scalar_bool_result", lambda x: x[0, 0] > 0, (X,),
     ["slice_by_index", "reshape", "greater", "cast", "reshape"], {"output": "reshape"}),
    ("bool_input_returned", lambda m: m, (M,), ["cast", "cast"], {"output": "cast"}),
    ("two_results", lambda x: (x + 1, x * 3), (X,), ["add", "mul"],
     {"output_0": "add", "output_1": "mul"}),
    ("dict_results", lambda x: {"b": -x, "a": jnp.exp(x)}, (X,), ["mul", "exp"],
     {"output_a": "exp", "output_b": "mul"}),
    ("constant_result", lambda x: (x + 1, jnp.arange(3.0, dtype=jnp.float32)), (X,), ["add"],
     {"output_0": "add", "output_1": "const"}),
    # folded at compile time (placement/fold.py): a constant result, as constant_result
    ("broadcast_constant", lambda x: (x + 1, jnp.full((3,), 2.5, jnp.float32)), (X,),
     ["add"], {"output_0": "add", "output_1": "const"}),
]
WITH_IDENTITY = [
    ("input_returned", lambda x: x, (X,), ["identity"], {"output": "identity"}),
    ("input_and_result", lambda x: (x, x + 1), (X,), ["add", "identity"],
     {"output_0": "identity", "output_1": "add"}),
    ("one_value_twice", _twice, (X,), ["mul", "identity"],
     {"output_0": "mul", "output_1": "identity"}),
    ("input_in_dict", lambda x: {"a": x * 2, "b": x}, (X,), ["mul", "identity"],
     {"output_a": "mul", "output_b": "identity"}),
    ("constant_twice", _constant_twice, (X,), None, None),
    ("constant_and_its_use", _constant_and_its_use, (X,), None, None),
    ("cond_passes_operand", _cond_passes_operand, (X,),
     ["reduce_sum", "greater", "cast", "less_equal", "cond", ["mul"], ["identity"]],
     {"output": "cond"}),
    ("scan_carry_as_y", _scan_carry_as_y, (X,), None,
     {"output_0": "while_loop", "output_1": "while_loop"}),
]
CASES = NO_IDENTITY + WITH_IDENTITY
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, fn, args, ops, outs", NO_IDENTITY, ids=[c[0] for c in NO_IDENTITY])
def test_outputs_are_the_ops_that_compute_them(name, fn, args, ops, outs):
    """Given:  functions whose results are computed (bool results travel as int32, rank-0
               ones as shape (1,): the cast or reshape is the output)
       Result: exactly these MIL ops, no identity; each output is its op's result"""
    prog = program(fn, *args)
    assert op_list(main(prog).operations) == ops
    assert made_by(prog) == outs
    assert list(outs) == sorted(prog.output_names)


@pytest.mark.parametrize("name, fn, args, ops, outs", WITH_IDENTITY[:4],
                         ids=[c[0] for c in WITH_IDENTITY[:4]])
def test_an_identity_only_for_an_input_or_a_repeated_value(name, fn, args, ops, outs):
    """Given:  an input returned as it is (its name is the model input's: a var has one
               name), one value returned as two outputs (output names are unique)
       Result: one identity per such output, reading that var; none for the others"""
    prog = program(fn, *args)
    assert op_list(main(prog).operations) == ops
    assert made_by(prog) == outs
    func = main(prog)
    inputs = set(map(id, func.inputs.values()))
    for v in func.outputs:
        if v.op.op_type == "identity":
            src = v.op.x
            assert id(src) in inputs or sum(o is src for o in func.outputs) == 1


def test_constant_result_is_named_and_repeated_constant_gets_one_identity():
    """Given:  a constant array returned, and the same constant also used by another result
       Result: the const itself is the output (no op for it); two outputs reading one const
               would be one var with two names: there, one identity"""
    func = main(program(_constant_and_its_use, X))
    first = func.outputs[0]
    assert first.op.op_type == "const" and first.name == "output_0"
    assert "identity" not in op_list(func.operations)
    func = main(program(_constant_twice, X))
    assert [v.op.op_type for v in func.outputs] == ["const", "identity", "add"]
    assert func.outputs[1].op.x is func.outputs[0]


def test_nested_blocks_keep_the_identity_of_a_passed_value():
    """Given:  a cond branch returning its operand, a scan step returning its carry as y
       Result: an identity inside that block (a block returns values of its own ops);
               none at the function's outputs, which are the cond / while_loop results"""
    prog = program(_cond_passes_operand, X)
    assert op_list(main(prog).operations)[-3:] == ["cond", ["mul"], ["identity"]]
    assert made_by(prog) == {"output": "cond"}
    prog = program(_scan_carry_as_y, X)
    ops = op_list(main(prog).operations)
    loop = ops[ops.index("while_loop") + 2]           # the body block (after the cond block)
    assert loop.count("identity") == 1
    assert made_by(prog) == {"output_0": "while_loop", "output_1": "while_loop"}


def test_an_inlined_branch_needs_no_identity():
    """Given:  an IR If with one branch (inlined, no cond) returning its operand and a product
       Result: no identity (the operand is an op of main: it is renamed); values as computed"""
    from rlx_jax.backends import all_backends
    from rlx_jax.ir.graph import Builder, Graph
    from rlx_jax.ir.ops import OpKind as K
    f3 = ((3,), np.float32)
    branch = Builder(Graph("branch"))
    v = branch.input(*f3)
    two = branch.add(K.Constant, (), {"value": np.full(3, 2, np.float32)}, out=[f3])
    branch.graph.outputs = [v, branch.add(K.Binary, (v, two), {"fn": "mul"}, out=[f3])]
    top = Builder(Graph("top"))
    i, x = top.input((), np.int32), top.input(*f3)
    y = top.add(K.Binary, (x, x), {"fn": "add"}, out=[f3])
    top.graph.outputs = list(top.add(K.If, (i, y), {}, out=[f3, f3], regions=[branch.graph]))
    coreml = all_backends()["coreml"]
    prog = coreml.build_program(top.graph)
    assert made_by(prog) == {"output_0": "add", "output_1": "mul"}
    assert "identity" not in prog.op_counts()
    got = coreml.lower(top.graph)(np.int32(0), np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(got[0], [0, 2, 4])
    np.testing.assert_array_equal(got[1], [0, 4, 8])


@pytest.mark.parametrize("optimize", ["fast", "default"])
@pytest.mark.parametrize("name, fn, args, ops, outs", CASES, ids=IDS)
def test_results_equal_jax(name, fn, args, ops, outs, optimize):
    """Given:  every case above, through coremltools' pass pipeline ("default") or none
       Result: the package runs (MIL reference executor on Linux) and equals jax.jit"""
    equals_jax(fn, *args, optimize=optimize)


def test_output_names_users_see_are_unchanged(tmp_path):
    """Given:  pytree results (one an input returned, one computed), and output_names=
       Result: the model outputs are named after the pytree paths / the given names, in
               the saved package's description and in its program"""
    def f(x, w):
        return {"y": jnp.tanh(x @ w), "x": x, "s": x.sum()}
    path = rlx_jax.export_coreml(f, X, W, path=str(tmp_path / "f.mlpackage"))
    spec = ct.utils.load_spec(path)
    assert sorted(o.name for o in spec.description.output) == ["output_s", "output_x",
                                                                "output_y"]
    assert [i.name for i in spec.description.input] == ["x", "w"]
    ex = MilReferenceExecutor(path)
    assert sorted(ex.output_names) == ["output_s", "output_x", "output_y"]
    prog = program(lambda x: (x, x * 2), X, output_names=["same", "double"])
    assert prog.output_names == ["same", "double"]
    assert made_by(prog) == {"same": "identity", "double": "mul"}
    got = rlx_jax.jit(lambda x: (x, x * 2), backend="coreml", output_names=["same", "double"])(X)
    np.testing.assert_array_equal(got[1], X * 2)
    got = rlx_jax.jit(f, backend="coreml")(X, W)
    np.testing.assert_array_equal(got["x"], X)
    np.testing.assert_allclose(got["y"], np.tanh(X @ W), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("optimize", ["fast", "default"])
def test_saved_package_loads_with_coremltools_and_runs(tmp_path, optimize):
    """Given:  a package of a computed result, an input returned and a value returned twice
       Result: coremltools loads it (its spec, and MLModel); it runs (Core ML on macOS, the
               MIL reference executor elsewhere) with JAX's values under the output names"""
    def f(x, m):
        y = x * 2 + 1
        return {"y": y, "y2": y, "x": x, "m": jnp.logical_not(m)}
    x, m = X[0], M
    path = rlx_jax.export_coreml(f, x, m, path=str(tmp_path / "p.mlpackage"),
                                 optimize=optimize)
    model = ct.models.MLModel(path, skip_model_load=not coreml_runtime_available())
    names = sorted(o.name for o in model.get_spec().description.output)
    assert names == ["output_m", "output_x", "output_y", "output_y2"]
    feeds = {"x": x, "m": m.astype(np.int32)}
    out = model.predict(feeds) if coreml_runtime_available() else MilReferenceExecutor(path)(feeds)
    want = f(x, m)
    np.testing.assert_array_equal(out["output_y"], want["y"])
    np.testing.assert_array_equal(out["output_y2"], want["y"])
    np.testing.assert_array_equal(out["output_x"], x)
    np.testing.assert_array_equal(out["output_m"], np.asarray(want["m"]).astype(np.int32))
