"""rlx_jax.jit functions composed with JAX transformations (jax.grad, jax.vmap, jax.jit, jax.jvp,
jax.hessian), jax.jit's keywords, and the stages chain. The oracle is the same JAX
transformation of the plain function; tolerances: rtol 1e-4 / atol 1e-5 for first-order results,
rtol 1e-3 / atol 1e-4 for second derivatives and training steps (float32 on MLX and the MIL
reference executor, whose transcendental functions round differently from XLA's)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.api import Compiled
from rlx_jax.errors import BadArgumentError
from .where_ran import COREML_KEY_BITS

R = np.random.RandomState(0)
P = {"w": R.randn(3, 2).astype(np.float32), "b": R.randn(2).astype(np.float32)}
X = R.randn(4, 3).astype(np.float32)
XS = R.randn(5, 4, 3).astype(np.float32)
LABELS = np.array([0, 1, 1, 0], np.int32)


def model(p, x):
    return jnp.tanh(x @ p["w"] + p["b"])


def _close(got, want, rtol=1e-4, atol=1e-5):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w),
                                                         rtol=rtol, atol=atol), got, want)


@pytest.fixture
def runs(monkeypatch):
    """The (function name, runtime) of every rlx_jax executable that ran."""
    seen = []
    call_flat = Compiled.call_flat

    def counting(self, leaves):
        seen.append((self.lowered.name, self.runtime))
        return call_flat(self, leaves)
    monkeypatch.setattr(Compiled, "call_flat", counting)
    return seen


def _ran_on(runs, backend, *names):
    """Each of `names` ran, and every run was on `backend`'s runtime."""
    assert {n for n, _ in runs} >= set(names), runs
    assert all(r.startswith(backend) or r.startswith("mil-reference") for _, r in runs), runs


# ---- jax.grad through an rlx_jax.jit function ---------------------------------------------------

def test_grad_through_a_jitted_function(backend, runs):
    f = rlx_jax.jit(model, backend=backend)
    got = jax.grad(lambda p: f(p, X).sum())(P)
    _close(got, jax.grad(lambda p: model(p, X).sum())(P))
    _ran_on(runs, backend, "model", "model_jvp_transpose")
    closed = jax.make_jaxpr(jax.grad(lambda p: f(p, X).sum()))(P)
    top = {e.primitive.name for e in closed.jaxpr.eqns}     # the model runs inside rlx_call
    assert "rlx_call" in top and "tanh" not in top and "dot_general" not in top
    # printed, each rlx_call shows its function's jaxpr nested (as JAX prints a jit call's)
    calls = [e for e in closed.jaxpr.eqns if e.primitive.name == "rlx_call"]
    text = str(closed)
    assert text.count("rlx_call[") == len(calls) and text.count("jaxpr={ lambda") >= len(calls)
    assert "tanh" in text and "fn=model_jvp_transpose@" in text


def test_value_and_grad_and_jvp(backend):
    f = rlx_jax.jit(model, backend=backend)
    v, g = jax.value_and_grad(lambda p, x: f(p, x).mean(), argnums=(0, 1))(P, X)
    rv, rg = jax.value_and_grad(lambda p, x: model(p, x).mean(), argnums=(0, 1))(P, X)
    _close((v, g), (rv, rg))
    t = jax.tree.map(np.ones_like, P)
    _close(jax.jvp(lambda p: f(p, X), (P,), (t,)), jax.jvp(lambda p: model(p, X), (P,), (t,)))


def test_second_derivatives(backend):
    f = rlx_jax.jit(lambda w, x: jnp.sum(jnp.sin(x @ w) ** 2), backend=backend)
    plain = f.__wrapped__
    gg = jax.grad(lambda w: jax.grad(f)(w, X).sum())(P["w"])
    _close(gg, jax.grad(lambda w: jax.grad(plain)(w, X).sum())(P["w"]), rtol=1e-3, atol=1e-4)
    _close(jax.hessian(f)(P["w"], X), jax.hessian(plain)(P["w"], X), rtol=1e-3, atol=1e-4)


# ---- jax.vmap -----------------------------------------------------------------------------------

@pytest.mark.parametrize("in_axes,out_axes", [((None, 0), 0), ((None, 1), 0), ((None, 0), 1),
                                              ((0, 0), 0)])
def test_vmap(backend, runs, in_axes, out_axes):
    f = rlx_jax.jit(model, backend=backend)
    xs = np.moveaxis(XS, 0, 1) if in_axes[1] == 1 else XS
    ps = P if in_axes[0] is None else jax.tree.map(lambda a: np.stack([a, a * 2] * 2 + [a]), P)
    got = jax.vmap(f, in_axes=in_axes, out_axes=out_axes)(ps, xs)
    _close(got, jax.vmap(model, in_axes=in_axes, out_axes=out_axes)(ps, xs))
    _ran_on(runs, backend, "model_vmap")


def test_grad_of_vmap_and_vmap_of_grad(backend):
    f = rlx_jax.jit(model, backend=backend)
    loss = lambda p, xs, m: jax.vmap(m, in_axes=(None, 0))(p, xs).sum()   # noqa: E731
    _close(jax.grad(loss)(P, XS, f), jax.grad(loss)(P, XS, model))
    per_example = jax.vmap(jax.grad(lambda p, x, m: m(p, x).sum()), in_axes=(None, 0, None))
    _close(per_example(P, XS, f), per_example(P, XS, model))


# ---- inside jax.jit -----------------------------------------------------------------------------

def test_inside_jax_jit_the_rlx_part_runs_on_the_backend(backend, runs):
    f = rlx_jax.jit(model, backend=backend)
    g = jax.jit(lambda p: f(p, X) * 2)
    _close(g(P), model(P, X) * 2)
    _close(g(P), model(P, X) * 2)            # a second call: the compiled callback again
    assert [n for n, _ in runs] == ["model", "model"]
    _ran_on(runs, backend, "model")
    hlo = g.lower(P).as_text()
    assert "callback" in hlo and "tanh" not in hlo
    _close(jax.jit(jax.grad(lambda p: f(p, X).sum()))(P),
           jax.grad(lambda p: model(p, X).sum())(P))


def test_training_step_with_jax_grad_of_an_rlx_forward(backend, runs):
    forward = rlx_jax.jit(model, backend=backend)

    def make_step(fwd):
        def loss(p, x, labels):
            logp = jax.nn.log_softmax(fwd(p, x))
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

        @jax.jit
        def step(p, x, labels):
            l, g = jax.value_and_grad(loss)(p, x, labels)
            return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), l
        return step
    fast, ref = make_step(forward), make_step(model)
    p, q = P, P
    for _ in range(3):
        (p, l), (q, m) = fast(p, X, LABELS), ref(q, X, LABELS)
        _close((p, l), (q, m), rtol=1e-3, atol=1e-4)
    _ran_on(runs, backend, "model", "model_jvp_transpose")


# ---- arguments: statics, keywords, keys ---------------------------------------------------------

def _dropout_model(p, x, key, *, train, rate=0.5):
    h = model(p, x)
    if train:
        h = jnp.where(jax.random.bernoulli(key, 1 - rate, h.shape), h / (1 - rate), 0.0)
    return h


@COREML_KEY_BITS
def test_statics_keywords_and_typed_keys(backend):
    f = rlx_jax.jit(_dropout_model, backend=backend, static_argnames=("train",),
                    donate_argnums=(0,))
    # key=None when unused: Core ML refuses an unused key argument (a u32[2] input)
    for train, key in ((True, jax.random.key(3)), (False, None)):
        got = jax.grad(lambda p: f(p, X, key, train=train, rate=0.25).sum())(P)
        want = jax.grad(lambda p: _dropout_model(p, X, key, train=train, rate=0.25).sum())(P)
        _close(got, want)
    key = jax.random.key(4)
    _close(jax.jit(lambda p, k: f(p, X, k, train=True))(P, key),
           _dropout_model(P, X, key, train=True))


@COREML_KEY_BITS
def test_key_results_come_back_as_keys(backend):
    split = rlx_jax.jit(lambda k, x: (jax.random.split(k)[0], x * 2), backend=backend)
    k, y = jax.jit(split)(jax.random.key(1), X)
    assert jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(k),
                                  jax.random.key_data(jax.random.split(jax.random.key(1))[0]))
    _close(y, X * 2)


def test_nested_rlx_functions_are_inlined_in_the_transformed_program(backend):
    inner = rlx_jax.jit(lambda x: jnp.sin(x) * 2, backend=backend)
    outer = rlx_jax.jit(lambda p, x: model(p, inner(x)), backend=backend)
    _close(jax.grad(lambda p: outer(p, X).sum())(P),
           jax.grad(lambda p: model(p, jnp.sin(X) * 2).sum())(P))
    assert inner.trace_count == 0


# ---- jax.jit's keywords -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["xla", "mlx", "coreml", "auto"])
def test_jax_jit_keywords(name):
    if name != "auto" and name not in rlx_jax.available_backends():
        pytest.skip(f"{name} is not available")
    step = functools.partial(_dropout_model, rate=0.1)
    j = rlx_jax.jit(step, backend=name, donate_argnums=(0,), donate_argnames=("x",),
                    static_argnames=("train",), keep_unused=True, inline=False)
    _close(j(P, X, None, train=False), model(P, X))
    for kw, text in [("in_shardings", "one device"), ("out_shardings", "one device"),
                     ("device", "jax.default_device"), ("abstracted_axes", "static")]:
        with pytest.raises(BadArgumentError, match=f"{kw}= is a jax.jit keyword.*{text}"):
            rlx_jax.jit(step, backend=name, **{kw: None})
    with pytest.raises(BadArgumentError, match=r"unknown option\(s\) \['donate'\]; accepted: "
                                               r"jax.jit's .*donate_argnums.*keep_unused"):
        rlx_jax.jit(step, backend=name, donate=(0,))
    with pytest.raises(BadArgumentError, match="donate_argnums='p'; it must be an int"):
        rlx_jax.jit(step, backend=name, donate_argnums="p")


def test_jax_platform_as_backend_says_what_to_do():
    for platform in ("cpu", "gpu", "tpu"):
        with pytest.raises(BadArgumentError, match=f"'{platform}' is a JAX/XLA platform.*"
                                                   f"backend='xla'.*JAX_PLATFORMS"):
            rlx_jax.jit(model, backend=platform)


def test_donated_arguments_are_left_intact(backend):
    f = rlx_jax.jit(lambda p, x: jax.tree.map(lambda a: a * 2, p), backend=backend,
                    donate_argnums=0)
    p = jax.tree.map(jnp.asarray, P)
    _close(f(p, X), jax.tree.map(lambda a: a * 2, P))
    _close(p, P)                      # a documented no-op: nothing is aliased


# ---- stages -------------------------------------------------------------------------------------

def test_stages(backend):
    f = rlx_jax.jit(lambda w, x: x @ w, backend=backend)
    traced = f.trace(P["w"], X)
    assert "dot_general" in str(traced.jaxpr) and traced.graph.op_counts() == {"DotGeneral": 1}
    lowered = traced.lower()
    assert lowered.backend.name == backend
    compiled = lowered.compile()
    _close(compiled(P["w"], X), X @ P["w"])
    assert isinstance(compiled.as_text(), str) and compiled.as_text()
    cost = compiled.cost_analysis()
    assert cost["flops"] == 2 * 4 * 2 * 3                  # 2 x output elements x contraction
    assert cost["bytes accessed"] == (3 * 2 + 4 * 3 + 4 * 2) * 4
    mem = compiled.memory_analysis()
    assert (mem.argument_size_in_bytes, mem.output_size_in_bytes) == (72, 32)
    assert mem.temp_size_in_bytes == 0 and mem.alias_size_in_bytes == 0


def test_cost_and_memory_of_a_larger_program():
    def f(w, x):
        h = jnp.tanh(x @ w)
        return h.sum(), h * 2
    compiled = rlx_jax.jit(f, backend="xla").lower(P["w"], X).compile()
    cost = compiled.cost_analysis()
    # matmul 48, tanh 8, sum over 8 inputs, multiply 8 (+ a possible broadcast of the 2.0: 0)
    assert cost["flops"] == 48 + 8 + 8 + 8
    mem = compiled.memory_analysis()
    assert mem.output_size_in_bytes == 4 + 32
    assert mem.temp_size_in_bytes >= 2 * 32                # the matmul and tanh results
    assert "DotGeneral" in compiled.as_text()


def test_functions_closing_over_outer_tracers_take_them_as_inputs(backend):
    """A jitted closure over values an outer JAX transformation traces (a jax.grad variable,
    a while loop's carry: JAX's testWhileWithClosureJit) binds rlx_call with them as inputs;
    lowering such a function, which needs concrete values, is refused naming them."""
    from jax import lax
    from rlx_jax.errors import UnsupportedTransformationError

    def outer(s):
        return rlx_jax.jit(lambda x: jnp.tanh(x * s).sum(), backend=backend)(X)
    _close(jax.grad(outer)(0.5), jax.grad(lambda s: jnp.tanh(X * s).sum())(0.5))
    _close(outer(0.5), jnp.tanh(X * 0.5).sum())

    def loop(limit, inc):
        def body(state):
            pos, count = state
            return rlx_jax.jit(lambda p, i: (p + 1, count + i), backend=backend)(pos, inc)
        return lax.while_loop(lambda s: s[0] < limit, body, (0, 0))[1]
    assert int(loop(4, 3)) == 12 and int(jax.jit(loop)(5, 3)) == 15
    jaxpr = str(jax.make_jaxpr(outer)(0.5))       # the closed-over value is an rlx_call input
    assert "rlx_call" in jaxpr and "tanh" in jaxpr

    def lowered(s):
        rlx_jax.jit(lambda x: (x * s).sum(), backend=backend).lower(X)
        return s
    with pytest.raises(UnsupportedTransformationError, match=r"closes over 1 value\(s\) traced "
                                                             r"by an outer JAX.*as arguments"):
        jax.grad(lowered)(2.0)


def test_inputs_with_zero_tangents_stay_unperturbed(backend):
    """Differentiating an rlx_jax.jit function by one argument leaves the others constants of
    the tangent map: a custom_vjp with symbolic_zeros sees them unperturbed and gets symbolic
    zero cotangents, as under jax.jit (JAX's test_symbolic_zero_custom_vjp_basic)."""
    seen = []

    @jax.custom_vjp
    def f(x, y):
        return x * y, y

    def fwd(x, y):
        seen.append((x.perturbed, y.perturbed))
        return (x.value * y.value, y.value), y.value

    def bwd(y, g):
        gxy, gy = g
        zero = jax.custom_derivatives.SymbolicZero
        return (None if type(gxy) is zero else gxy * y), None

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    h = rlx_jax.jit(lambda x, y: f(x, y)[0], backend=backend)
    got = jax.grad(h)(np.float32(3.0), np.float32(5.0))
    assert seen[-1] == (True, False)
    want = jax.grad(jax.jit(lambda x, y: f(x, y)[0]))(np.float32(3.0), np.float32(5.0))
    assert seen[-1] == (True, False)
    _close(got, want)


def test_vmap_axis_names_reach_the_jitted_function(backend):
    """lax.axis_index / psum over an enclosing jax.vmap's axis inside an rlx_jax.jit function
    (JAX's testWhileLoopAxisIndexBatched): its rlx_call is batched with that axis, also when
    none of its arguments is batched."""
    from jax import lax

    def fun(x):
        return lax.while_loop(lambda v: v < lax.axis_index("i"), lambda v: v + 2, x) \
            + lax.psum(x, "i")
    f = rlx_jax.jit(fun, backend=backend)
    x = np.array([0, 1, 0, 1], np.int32)
    np.testing.assert_array_equal(jax.vmap(f, axis_name="i")(x), jax.vmap(fun, axis_name="i")(x))
    unbatched = jax.vmap(lambda _, v: f(v), axis_name="i", in_axes=(0, None))
    np.testing.assert_array_equal(unbatched(x, np.int32(1)),
                                  jax.vmap(lambda _, v: fun(v), axis_name="i",
                                           in_axes=(0, None))(x, np.int32(1)))
    np.testing.assert_array_equal(jax.jit(jax.vmap(f, axis_name="i"))(x),
                                  jax.vmap(fun, axis_name="i")(x))


def test_reverse_mode_of_a_function_jax_differentiates_in_reverse_only(backend):
    """Under jax_custom_vjp3 a custom_vjp has no JVP (JAX raises NotImplementedError for
    jax.jvp of it): jax.grad / jacrev of an rlx_jax.jit function holding one take JAX's
    linearization path, whose tangent call is transposed from jax.vjp of the function (JAX's
    test_symbolic_zero_custom_vjp_basic under CustomVJP3Test)."""
    from jax._src import config

    @jax.custom_vjp
    def f(x, y):
        return x * y, x

    def fwd(x, y):
        return (x.value * y.value, x.value), (x.value, y.value)

    def bwd(res, g):
        (x, y), (g0, g1) = res, g
        zero = jax.custom_derivatives.SymbolicZero
        g0 = 0.0 if type(g0) is zero else g0
        g1 = 0.0 if type(g1) is zero else g1
        return g0 * y + 2.0 * g1, g0 * x          # not f's true derivative: bwd decides

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    x, y = np.float32(3.0), np.float32(5.0)
    with config.custom_vjp3(True):
        h = rlx_jax.jit(f, backend=backend)
        for tr in (jax.jacrev, functools.partial(jax.jacrev, argnums=(0, 1))):
            _close(tr(h)(x, y), tr(jax.jit(f))(x, y))
        loss = lambda fun: lambda a, b: fun(a, b)[0] + 3.0 * fun(a, b)[1]  # noqa: E731
        _close(jax.grad(loss(h), argnums=(0, 1))(x, y),
               jax.grad(loss(jax.jit(f)), argnums=(0, 1))(x, y))

