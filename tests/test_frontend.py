"""The jaxpr frontend: inlining, DCE, constants, source lines, unsupported-primitive errors, the IR
printer and the Builder's type checks. Structural assertions are exact op counts; numerics are
checked against JAX on the reference backend."""
import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
try:                      # jax >= 0.10: the primitive that stages a closed_call eqn
    from jax._src.lax.eval_jaxpr import eval_jaxpr_p
except ImportError:       # jax 0.9 stages closed_call only inside its own transformations
    eval_jaxpr_p = None

import rlx_jax
from rlx_jax.errors import IRTypeError, UnsupportedPrimitiveError
from rlx_jax.frontend.trace import CALL_PARAMS
from rlx_jax.ir import Builder, OpKind

HERE = os.path.basename(__file__)
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
CALLS = set(CALL_PARAMS)


def _line_of(fn, text):
    """The file line of the first source line of `fn` that contains `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def _check(fn, *args):
    """Traces `fn`, asserts no call-like node survived and the xla result equals JAX's."""
    g = rlx_jax.trace(fn, *args)
    got = rlx_jax.jit(fn, backend="xla")(*args)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                 got, fn(*args))
    return g


# ---- inlining ----------------------------------------------------------------------------------

def _closed_call(fn):
    """Wraps `fn` so that it is staged as a `closed_call` primitive."""
    def wrapped(x):
        if eval_jaxpr_p is None:
            pytest.skip(f"jax {jax.__version__} has no public way to stage a closed_call eqn")
        closed = jax.make_jaxpr(fn)(x)
        return eval_jaxpr_p.bind(x, jaxpr=closed)[0]
    return wrapped


@jax.custom_vjp
def _scaled_sin(x):
    return jnp.sin(x)


_scaled_sin.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (3.0 * c * g,))


@pytest.mark.parametrize("name, fn, prim, counts", [
    ("jit", lambda x: jax.jit(lambda y: jnp.sin(y) * 2.0)(x), "jit",
     {"Activation": 1, "Binary": 1}),
    ("nested_jit", jax.jit(lambda x: jax.jit(jnp.exp)(jax.jit(jnp.sin)(x))), "jit",
     {"Activation": 2}),
    ("closed_call", _closed_call(lambda y: jnp.cos(y) + 1.0), "closed_call",
     {"Activation": 1, "Binary": 1}),
    ("relu", jax.nn.relu, "custom_jvp_call", {"Binary": 1}),
    ("softplus", jax.nn.softplus, "custom_jvp_call", None),
    ("relu6", jax.nn.relu6, "custom_jvp_call", {"Binary": 2}),
    ("custom_vjp", _scaled_sin, "custom_vjp_call", {"Activation": 1}),
    ("checkpoint", jax.checkpoint(lambda x: jnp.sin(jnp.sin(x))), "remat2", {"Activation": 2}),
])
def test_call_primitives_are_inlined(name, fn, prim, counts):
    """Given:  a jaxpr with a call-like primitive (jit, closed_call, custom_jvp_call,
               custom_vjp_call, remat2) around its body, e.g. jit(sin(y) * 2.0)
       Result: the body inlined, no call-like node left: exactly `counts`, e.g.
               {Activation: 1, Binary: 1}; values equal JAX"""
    from tests.test_coverage import primitive_names
    assert prim in primitive_names(jax.make_jaxpr(fn)(X).jaxpr), "case does not exercise " + prim
    g = _check(fn, X)
    assert not {n.kind.name for n in g.nodes} & CALLS
    if counts is not None:
        assert g.op_counts() == counts, g.as_text()


def test_custom_vjp_backward_is_the_users():
    """Under jax.grad the user's bwd rule (3·cos) is what runs, not the true derivative."""
    grad = jax.grad(lambda x: jnp.sum(_scaled_sin(x)))
    got = rlx_jax.jit(grad, backend="xla")(X)
    np.testing.assert_allclose(got, 3.0 * np.cos(X), rtol=1e-6)


def test_grad_of_checkpoint_and_custom_jvp():
    f = jax.grad(lambda x: jnp.sum(jax.checkpoint(lambda y: jax.nn.softplus(jnp.sin(y)))(x)))
    _check(f, X)


# ---- DCE, constants ----------------------------------------------------------------------------

def test_dead_code_is_removed():
    """Given:  unused = exp(x) * 3.0; a, b, c = split(x, [1, 2], axis=1); return b * 2.0
       Result: Slice, Binary (the dead exp/mul and the unused split parts are gone)"""
    def f(x):
        unused = jnp.exp(x) * 3.0   # noqa: F841 - dead on purpose
        a, b, c = jnp.split(x, [1, 2], axis=1)
        return b * 2.0
    g = _check(f, X)
    assert g.op_counts() == {"Binary": 1, "Slice": 1}, g.as_text()


def test_unused_output_of_multi_output_call_vanishes():
    """Given:  vals, idx = top_k(x, 2); return vals
       Result: TopK, one graph output"""
    def f(x):
        vals, idx = lax.top_k(x, 2)
        return vals
    g = rlx_jax.trace(f, X)
    assert g.op_counts() == {"TopK": 1}
    assert len(g.outputs) == 1


def test_literals_and_closed_over_arrays_become_constants():
    """Given:  x * 2.0 + table - 2.0 * asarray(table), `table` a closed-over numpy array
       Result: Constant nodes for `table` and for the literal 2.0 (one node, though used twice);
               no Input after the first node"""
    table = np.arange(4, dtype=np.float32) + 0.5

    def f(x):
        return x * 2.0 + table - 2.0 * jnp.asarray(table)

    g = _check(f, X)
    consts = [n for n in g.nodes if n.kind is OpKind.Constant]
    values = sorted(float(np.asarray(n.attrs["value"]).reshape(-1)[0]) for n in consts)
    assert any(np.array_equal(n.attrs["value"], table) for n in consts), g.as_text()
    assert 2.0 in values
    # the literal 2.0 (used twice) becomes one Constant
    assert sum(1 for n in consts if n.attrs["value"].shape == () and
               float(n.attrs["value"]) == 2.0) == 1, g.as_text()
    assert all(n.kind is not OpKind.Input for n in g.nodes[1:])


# ---- source lines ------------------------------------------------------------------------------

def _two_lines(x):
    y = jnp.sin(x)
    return jnp.exp(y) * 3.0


def test_every_node_records_the_users_line():
    g = rlx_jax.trace(_two_lines, X)
    srcs = {n.kind: n.src for n in g.nodes if n.kind not in (OpKind.Input, OpKind.Constant)}
    sin_line = _line_of(_two_lines, "jnp.sin")
    exp_line = _line_of(_two_lines, "jnp.exp")
    assert set(srcs) == {OpKind.Activation, OpKind.Binary}
    for n in g.nodes:
        if n.kind in (OpKind.Input, OpKind.Constant):
            continue
        assert n.src is not None and n.src.startswith(f"{HERE}:"), n
        assert "_two_lines" in n.src
    acts = [n for n in g.nodes if n.kind is OpKind.Activation]
    assert acts[0].src.startswith(f"{HERE}:{sin_line} ")
    assert acts[1].src.startswith(f"{HERE}:{exp_line} ")
    assert [n for n in g.nodes if n.kind is OpKind.Binary][0].src.startswith(
        f"{HERE}:{exp_line} ")


def test_source_lines_survive_inlining_and_grad():
    def inner(x):
        return jnp.tanh(x)

    def outer(x):
        return jnp.sum(jax.jit(inner)(x) ** 2)

    g = rlx_jax.trace(jax.grad(outer), X)
    tanh_line = _line_of(inner, "jnp.tanh")
    tanh = [n for n in g.nodes if n.attrs.get("fn") == "tanh"]
    assert tanh and all(n.src.startswith(f"{HERE}:{tanh_line} ") for n in tanh)
    assert all(n.src for n in g.nodes if n.kind not in (OpKind.Input, OpKind.Constant))


# ---- unsupported primitives --------------------------------------------------------------------

def _uses_unsupported(x):
    a = lax.igamma(x[:, :3] * x[:, :3] + 1.0, jnp.ones((3, 3)))
    b = lax.igamma(a * a + 1.0, jnp.ones((3, 3)))
    noise = lax.rng_uniform(jnp.float32(0), jnp.float32(1), x.shape)
    return jnp.sum(b) + noise


def test_unsupported_primitives_are_reported_once_with_counts_and_lines():
    with pytest.raises(UnsupportedPrimitiveError) as info:
        rlx_jax.jit(_uses_unsupported, backend="xla", fallback="error").lower(X)
    msg = str(info.value)
    chol_line = _line_of(_uses_unsupported, "a = lax.igamma")
    rand_line = _line_of(_uses_unsupported, "lax.rng_uniform")
    assert "igamma ×2" in msg, msg
    assert f"{HERE}:{chol_line}" in msg, msg
    assert "XLA's stateful generator" in msg and "special function" in msg
    assert f"{HERE}:{rand_line}" in msg, msg
    assert "rng_uniform ×1" in msg, msg
    assert "= igamma " in msg       # the eqn text
    assert msg.count(f"at {HERE}:") == len(info.value.args[0].split("×")) - 1
    assert msg.count("unsupported JAX primitive(s)") == 1
    assert "file a frontend rule" in msg
    assert "igamma run as JAX on the host with fallback='host'" in msg


def test_unsupported_error_through_jit_names_every_primitive():
    with pytest.raises(UnsupportedPrimitiveError) as info:
        rlx_jax.jit(_uses_unsupported, backend="xla", fallback="error")(X)
    listed = [ln.split()[0] for ln in str(info.value).splitlines() if "×" in ln]
    assert "igamma" in listed and len(listed) >= 2, listed


def test_with_host_fallback_only_primitives_that_cannot_run_on_the_host_are_refused():
    """igamma is kept as a HostPrimitive (it runs as JAX); rng_uniform is refused."""
    with pytest.raises(UnsupportedPrimitiveError) as info:
        rlx_jax.trace(_uses_unsupported, X)
    listed = [ln.split()[0] for ln in str(info.value).splitlines() if "×" in ln]
    assert "igamma" not in listed and listed == ["rng_uniform"], listed


def test_reduce_window_with_a_general_body_is_one_slice_and_body_per_window_element():
    """A body other than one add/max/min of its operands (lax.mul: no monoid JAX or rlx_jax
    knows for reduce_window) is folded over the window: the init value broadcast, then per
    window element a strided Slice and the body; no padding here, so no mask (Where)."""
    f = lambda x: lax.reduce_window(x, 1.0, lax.mul, (2, 2), (1, 1), "VALID")  # noqa: E731
    g = _check(f, X)
    assert g.op_counts() == {"Binary": 4, "Expand": 1, "Slice": 4}, g.as_text()
    # a rank-0 reduce_window is its operand on XLA (the init value unused)
    scalar = lambda x: lax.reduce_window(x[0, 0], 0.5, lax.mul, (), (), ())  # noqa: E731
    assert _check(scalar, X).op_counts() == {"Reshape": 1, "Slice": 1}


def test_scatter_with_a_general_update_computation_is_refused():
    """A scatter's update_jaxpr is what XLA computes at each update; one that is no replace,
    add, sub, mul, min, max or function of the operand alone is refused, never replaced."""
    from jax._src.lax import lax as lax_internal, slicing
    jaxpr, consts = lax_internal._reduction_jaxpr(lambda a, b: a * b + 1.0,
                                                  jax.core.ShapedArray((), np.float32))
    f = lambda x, u: slicing.scatter_p.bind(  # noqa: E731
        x, np.array([[0], [2]], np.int32), u, update_jaxpr=jaxpr, update_consts=consts,
        dimension_numbers=lax.ScatterDimensionNumbers((), (0,), (0,)),
        indices_are_sorted=False, unique_indices=False, mode=lax.GatherScatterMode.CLIP)
    with pytest.raises(UnsupportedPrimitiveError, match="update computation") as info:
        rlx_jax.jit(f, backend="xla")(X[0], X[0, :2])
    assert "scatter ×1" in str(info.value) and "lax.scatter_apply" in str(info.value)


# ---- printer and builder -----------------------------------------------------------------------

def test_printer_text():
    def f(x, y):
        return jnp.sum(x * y, axis=1)
    text = rlx_jax.trace(f, X, X).as_text()
    body = [ln.split("#")[0].rstrip() for ln in text.splitlines()]
    assert body == [
        "{ lambda ; a:f32[3,4] b:f32[3,4] . let",
        "    c:f32[3,4] = Binary[fn=mul] a b",
        "    d:f32[3] = Reduce[fn=sum, axes=(1,)] c",
        "  in (d) }",
    ], text
    line = _line_of(f, "jnp.sum")
    assert text.count(f"# {HERE}:{line} ({f.__qualname__})") == 2


def test_printer_multi_output_and_attrs():
    g = rlx_jax.trace(lambda x: lax.top_k(x, 2), X)
    text = g.as_text()
    assert "b:f32[3,2] c:i32[3,2] = TopK[k=2] a" in text, text
    assert "in (b, c)" in text


def test_builder_refuses_ill_typed_nodes():
    b = Builder()
    x = b.input((3,), np.float32)
    y = b.input((4,), np.float32)
    i = b.input((3,), np.int32)
    with pytest.raises(IRTypeError, match="Binary"):
        b.binary("add", x, y)
    with pytest.raises(IRTypeError, match="differ in dtype"):
        b.binary("mul", x, i)
    with pytest.raises(IRTypeError):
        b.reshape(x, (2, 2))
    with pytest.raises(IRTypeError):
        b.transpose(x, (1, 0))
    with pytest.raises(IRTypeError):
        b.expand(y, (3, 3))
    with pytest.raises(IRTypeError):
        b.add(OpKind.DotGeneral, (x, y), {"dimension_numbers": (((0,), (0,)), ((), ())),
                                          "preferred_element_type": None})
    ok = b.binary("add", x, x)
    assert (ok.shape, ok.dtype) == ((3,), np.dtype(np.float32))
    assert b.expand(x, (2, 3)).shape == (2, 3)


def test_graph_verify_rejects_use_before_definition():
    b = Builder()
    x = b.input((3,), np.float32)
    y = b.unary("exp", x)
    b.graph.outputs = [y]
    b.graph.nodes.reverse()
    with pytest.raises(IRTypeError, match="before it is defined"):
        b.graph.verify()


def test_no_call_like_node_survives():
    """Given:  jit(checkpoint(relu)(closed_call(sin)(x)))
       Result: only Input, Constant, Activation and Binary nodes"""
    f = jax.jit(lambda x: jax.checkpoint(jax.nn.relu)(_closed_call(jnp.sin)(x)))
    g = rlx_jax.trace(f, X)
    assert {n.kind for n in g.nodes} <= {OpKind.Input, OpKind.Constant, OpKind.Activation,
                                         OpKind.Binary}
    assert CALLS  # the table of inlined primitives is not empty


def test_frontend_does_not_run_shape_inference_per_node(monkeypatch):
    """Eqn outputs take their types from the jaxpr, and the verifier checks them against the
    reference semantics memoised per signature: a deep program costs one abstract evaluation
    per distinct (kind, attributes, operand types), not one per node."""
    from rlx_jax.ir import shapes
    calls = []
    real = shapes._infer
    monkeypatch.setattr(shapes, "_infer", lambda node: calls.append(node) or real(node))
    monkeypatch.setattr(shapes, "_CACHE", {})

    def deep(ws, x):
        for w in ws:
            h = x @ w
            h = (h - h.mean(-1, keepdims=True)) * lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)
            x = x + jnp.where(h > 0, h, 0.1 * h)[:, ::-1] + jnp.clip(h, -1, 1)
        return jnp.sum(jax.nn.log_softmax(x))

    ws = [np.full((8, 8), 0.01, np.float32)] * 40
    g = rlx_jax.trace(jax.grad(deep), ws, np.ones((2, 8), np.float32))
    assert len(g.nodes) > 1500
    signatures = {shapes._key(n) for n in calls}
    assert len(calls) == len(signatures) < 50, sorted({n.kind.name for n in calls})


def test_reshard_on_one_device_moves_nothing():
    # jax.random's out_sharding= stages a reshard; on one device it is the identity
    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    f = lambda k: jax.random.uniform(k, (4,), out_sharding=sharding)   # noqa: E731
    key = jax.random.key(0)
    with jax.set_mesh(mesh):
        assert "reshard" in str(jax.make_jaxpr(f)(key))
        got = rlx_jax.jit(f, backend="xla")(key)
        want = jax.jit(f)(key)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("backend", ["xla", "mlx", "coreml"])
def test_composite_runs_its_decomposition_on_the_device(backend):
    # lax.composite names a computation for compilers that know it; its decomposition (the
    # `jaxpr` param) is its meaning, inlined like a call
    op = lax.composite(lambda x, k: jnp.sin(x) * k, name="my.op")
    f = lambda x: op(x, 3.0) + 1              # noqa: E731
    x = np.arange(3, dtype=np.float32)
    assert "composite" in str(jax.make_jaxpr(f)(x))
    jitted = rlx_jax.jit(f, backend=backend)
    np.testing.assert_allclose(np.asarray(jitted(x)), np.asarray(jax.jit(f)(x)), rtol=1e-6)
    lowered = jitted.lower(x)
    assert lowered.placement().device_only
    assert lowered.graph.op_counts().get("HostPrimitive", 0) == 0


def test_custom_element_types_are_refused_by_name():
    from jax._src import core as jax_core, dtypes as jax_dtypes

    class TagTy(jax_dtypes.ExtendedDType):       # a custom element type, not a PRNG key
        type, name = jax_dtypes.extended, "tag"
        __hash__ = lambda self: hash(TagTy)                          # noqa: E731
        __eq__ = lambda self, other: type(other) is TagTy           # noqa: E731
        __repr__ = __str__ = lambda self: "tag"                      # noqa: E731
    from jax.extend.core import Primitive
    from rlx_jax.errors import UnsupportedDtypeError
    make = Primitive("make_tag")
    make.def_abstract_eval(lambda x: jax_core.ShapedArray(x.shape, TagTy()))
    drop = Primitive("drop_tag")
    drop.def_abstract_eval(lambda t: jax_core.ShapedArray(t.shape, np.float32))

    def f(x):
        return drop.bind(make.bind(x)) + 1     # the line the error names
    line = inspect.getsourcelines(f)[1] + 1
    for backend in ("xla", "mlx"):
        with pytest.raises(UnsupportedDtypeError) as e:
            rlx_jax.jit(f, backend=backend)(np.ones(3, np.float32))
        msg = str(e.value)
        assert "make_tag" in msg and "dtype tag" in msg and "jax.dtypes.extended" in msg
        assert f"test_frontend.py:{line}" in msg
        assert isinstance(e.value, TypeError)
