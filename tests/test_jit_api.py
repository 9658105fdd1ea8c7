"""rlx_jax.jit as a JAX user meets it: jitted functions under jax.grad, methods, partials,
option checking, result types, PRNG keys. The oracle is JAX itself."""
import functools
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.lax import lax as lax_internal

import rlx_jax
from rlx_jax.errors import BadArgumentError, UnsupportedTransformationError

from .conftest import BACKENDS
from .where_ran import COREML_KEY_BITS, expect_host

R = np.random.RandomState(0)
W, X = R.randn(3, 2).astype(np.float32), R.randn(4, 3).astype(np.float32)
OTHER = {b: next(o for o in BACKENDS + ["xla"] if o != b) for b in BACKENDS}


def _loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def _close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


# ---- a jitted function inside jax.grad -------------------------------------------------------

def test_grad_of_a_jitted_function_jitted_again_is_the_gradient(backend):
    """The outer Jitted keeps its own state: it computes the gradient, on its own backend."""
    inner = rlx_jax.jit(_loss, backend=OTHER[backend])
    outer = rlx_jax.jit(jax.grad(inner), backend=backend)
    _close(outer(W, X), jax.grad(_loss)(W, X))
    assert outer.backend_name == backend and outer.fun is not inner.fun
    assert outer.lower(W, X).backend.name == backend
    assert inner.trace_count == 0          # inlined into the outer trace, never compiled alone


def test_jitted_helper_inside_a_jitted_function_is_inlined(backend):
    helper = rlx_jax.jit(lambda x: jnp.sin(x) * 2, backend=OTHER[backend])
    f = rlx_jax.jit(lambda x: helper(x) + 1, backend=backend)
    _close(f(X), jnp.sin(X) * 2 + 1)


@pytest.mark.parametrize("transform", ["grad", "vmap", "jax.jit"])
def test_jax_transformation_of_a_jitted_function_runs_it_on_its_backend(backend, transform):
    """An rlx_jax.jit function under a JAX transformation binds rlx_call (test_compose.py has
    the details); its executables run, on its backend."""
    f = rlx_jax.jit(_loss, backend=backend)
    got, want = {"grad": lambda: (jax.grad(f)(W, X), jax.grad(_loss)(W, X)),
                 "vmap": lambda: (jax.vmap(f, in_axes=(None, 0))(W, X[None]),
                                  jax.vmap(_loss, in_axes=(None, 0))(W, X[None])),
                 "jax.jit": lambda: (jax.jit(lambda w: f(w, X))(W), _loss(W, X))}[transform]()
    _close(got, want, rtol=1e-4, atol=1e-5)
    assert "rlx_call" in str({"grad": jax.make_jaxpr(jax.grad(f)),
                              "vmap": jax.make_jaxpr(jax.vmap(f, in_axes=(None, 0))),
                              "jax.jit": jax.make_jaxpr(jax.jit(f))}[transform](
        W, X[None] if transform == "vmap" else X))


def test_lower_on_tracers_is_refused_clearly():
    f = rlx_jax.jit(_loss, backend="xla")
    with pytest.raises(UnsupportedTransformationError) as e:
        jax.grad(lambda w: f.lower(w, X))(W)
    assert "_loss" in str(e.value) and f"{Path(__file__).name}:" in str(e.value)


# ---- methods, partials, callables without __name__ ---------------------------------------------

class Scaler:
    def __init__(self, k):
        self.k = k

    @rlx_jax.jit(backend="xla")
    def plain(self, x):
        return x * self.k

    @functools.partial(rlx_jax.jit, backend="xla", static_argnums=0)
    def static_self(self, x):
        return x + self.k


@jax.tree_util.register_pytree_node_class
class Linear:
    """A pytree of arrays: `self` is a dynamic argument, as with jax.jit."""

    def __init__(self, w):
        self.w = w

    def tree_flatten(self):
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)

    @rlx_jax.jit(backend="xla")
    def __call__(self, x):
        return x @ self.w


def test_methods():
    a, b = Scaler(2.0), Scaler(3.0)
    _close(a.plain(X), X * 2)
    _close(b.plain(X), X * 3)                 # a different instance: its own static self
    _close(a.static_self(X), X + 2)
    assert Scaler.plain.__name__ == "plain"
    assert a.plain.lower(X).op_counts() == {"Binary": 1}


def test_method_of_a_pytree_class_takes_self_as_arrays():
    lin = Linear(W)
    _close(lin(X), X @ W)
    _close(Linear(W * 2)(X), X @ (W * 2))
    jitted = Linear.__dict__["__call__"]
    assert jitted.trace_count == 1            # same shapes: one trace, self was dynamic


def test_partial_and_callable_objects(backend):
    p = functools.partial(lambda a, x: a * x, 3.0)
    j = rlx_jax.jit(p, backend=backend)
    _close(j(X), 3 * X)
    assert j.__name__ == "partial(<lambda>)"

    class Call:
        def __call__(self, x):
            return x - 1
    k = rlx_jax.jit(Call(), backend=backend)
    _close(k(X), X - 1)
    assert k.__name__ == "Call"


def test_static_args_none_means_none_as_in_jax_jit():
    """jax.jit(f, static_argnums=None, static_argnames=None) (JAX's tests pass None): no static
    argument; a name given still marks its position static."""
    f = lambda x, n: x * n  # noqa: E731
    j = rlx_jax.jit(f, backend="xla", static_argnums=None, static_argnames=None)
    _close(j(X, 3.0), jax.jit(f, static_argnums=None, static_argnames=None)(X, 3.0))
    assert j.static_argnums == frozenset() and j.static_argnames == frozenset()
    k = rlx_jax.jit(f, backend="xla", static_argnums=None, static_argnames="n")
    assert k.static_argnums == {1} and k.static_argnames == {"n"}
    _close(k(X, n=2), X * 2)


def test_unhashable_static_numpy_array_says_what_jax_says():
    j = rlx_jax.jit(lambda x, s: x * s.sum(), backend="xla", static_argnums=1)
    with pytest.raises(BadArgumentError, match="Non-hashable static arguments are not supported"
                                               r".*ndarray.*dynamic argument") as e:
        j(X, np.ones(2))
    assert "tuple instead of a list" not in str(e.value)


# ---- options, checked when jit is called -------------------------------------------------------

@pytest.mark.parametrize("name", BACKENDS + ["auto"])
def test_unknown_options_are_refused_at_jit_time_on_every_backend(name):
    for bad in ({"donate_argnum": 0}, {"output": "bogus"}, {"native_backward": "yes"}):
        with pytest.raises(BadArgumentError, match=f"{list(bad)[0]}"):
            rlx_jax.jit(lambda x: x, backend=name, **bad)
    with pytest.raises(BadArgumentError, match="accepted|every backend accepts"):
        rlx_jax.jit(lambda x: x, backend=name, donate_argnum=0)


def test_backend_options_need_their_backend():
    with pytest.raises(BadArgumentError, match="compute_precision.*coreml.*name it"):
        rlx_jax.jit(lambda x: x, compute_precision="float16")


@pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is not installed")
def test_coreml_option_values_are_checked_before_tracing():
    traced = []

    def f(x):
        traced.append(1)
        return x
    with pytest.raises(BadArgumentError, match="compute_precision"):
        rlx_jax.jit(f, backend="coreml", compute_precision="float8")
    assert not traced


@pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is not installed")
def test_export_coreml_refuses_compute_units(tmp_path):
    with pytest.raises(BadArgumentError, match="compute_units.*loaded"):
        rlx_jax.export_coreml(lambda x: x * 2, X, path=str(tmp_path / "m.mlpackage"),
                              compute_units="cpu_and_ne")


# ---- results: one kind everywhere --------------------------------------------------------------

NATIVE = {"xla": jax.Array, "coreml": np.ndarray}


def _native_type(backend):
    if backend == "mlx":
        import mlx.core as mx
        return mx.array
    return NATIVE[backend]


@pytest.mark.parametrize("output", [None, "jax", "numpy", "native"])
def test_output_kinds(backend, output):
    opts = {} if output is None else {"output": output}
    f = rlx_jax.jit(lambda x: (x + 1, {"s": jnp.sum(x)}), backend=backend, **opts)
    a, d = f(X)
    typ = {None: jax.Array, "jax": jax.Array, "numpy": np.ndarray,
           "native": _native_type(backend)}[output]
    assert isinstance(a, typ) and isinstance(d["s"], typ)
    want_a, want_s = X + 1, X.sum()
    _close(np.asarray(a) if output != "native" or backend != "mlx" else np.array(a), want_a)
    _close(np.asarray(d["s"]) if output != "native" or backend != "mlx" else np.array(d["s"]),
           want_s, rtol=1e-5)


def test_default_results_drop_into_plain_jax(backend):
    y = rlx_jax.jit(lambda x: x * 2, backend=backend)(X)
    _close(jnp.sin(y), np.sin(X * 2))
    _close(jax.jit(lambda v: v + 1)(y), X * 2 + 1)
    _close(jax.grad(lambda v: jnp.sum(v ** 2))(y), 4 * X)
    _close(rlx_jax.jit(lambda v: v - 1, backend="xla")(y), X * 2 - 1)


@pytest.mark.parametrize("view", ["reversed", "strided", "transposed", "reversed_2d"])
def test_non_contiguous_numpy_views_are_honoured(backend, view):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = {"reversed": base.ravel()[::-1], "strided": base.ravel()[::3],
         "transposed": base.T, "reversed_2d": base[::-1, ::-2]}[view]
    _close(rlx_jax.jit(lambda v: v * 2, backend=backend)(x), x * 2)


# ---- weak types, and the user's numpy rules ----------------------------------------------------

def _same(got, want):
    """Same values, dtypes and weak types, leaf by leaf."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert (g.dtype, g.weak_type) == (w.dtype, w.weak_type), (g, w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


@pytest.mark.host("complex64 values have no Core ML tensor: the host makes them",
                  backends=("coreml",))
@pytest.mark.parametrize("dtype", ["int32", "float32", "complex64"])
@pytest.mark.parametrize("weak", [True, False])
def test_results_carry_the_weak_types_of_jax_jit(backend, dtype, weak):
    """Every result has the weak type of the jaxpr's output, as jax.jit's (lax_numpy_test's
    testZerosOnesFullLikeWeakType), whether the backend's result had it or not."""
    x = lax_internal._convert_element_type(np.arange(1, 4).astype(dtype), weak_type=weak)
    for f in (lambda x: jnp.full_like(x, -100), lambda x: jnp.ones_like(x, shape=()),
              lambda x: jnp.zeros_like(x, dtype=float, shape=(10,)),
              lambda x: jnp.full_like(x, -100, shape=(2,)),
              lambda x: (x, lax.convert_element_type(x, x.dtype), x * 2)):
        _same(rlx_jax.jit(f, backend=backend)(x), jax.jit(f)(x))


def _cond(x):
    return lax.cond(lax.lt(x, 3), lambda x: 5, lambda x: x, x)


STRICT = {   # name -> (function, arguments); traced and run under strict numpy rules
    "cond_of_a_python_scalar": (_cond, (0,)),
    "cond_other_branch": (_cond, (4,)),
    "grad": (jax.grad(lambda x: jnp.sum(jnp.tanh(x) * 2.0)), (X,)),
    "softmax": (jax.nn.softmax, (X,)),
    "normal": (lambda k: jax.random.normal(k, (3,)), (jax.random.key(0),)),
    "uniform": (lambda k: jax.random.uniform(k, (3,), minval=1.0, maxval=2.0),
                (jax.random.key(1),)),
    "layer_norm_broadcasts": (lambda x: rlx_jax.nn.layer_norm(x, W[:, 0], W[:, 1]), (X,)),
    "rope_tables_broadcast": (lambda q: rlx_jax.nn.rope(q, *rlx_jax.nn.rope_tables(3, 4)),
                              (R.randn(1, 2, 3, 4).astype(np.float32),)),
    "reduce_window_body": (lambda x: lax.reduce_window(
        x, 1.0, lambda a, b: a * b + a, (2, 2), (1, 1), "SAME"), (X,)),
}


@COREML_KEY_BITS
@pytest.mark.parametrize("name", sorted(STRICT))
def test_strict_numpy_rules_apply_to_the_users_code_only(backend, name):
    """Under jax.numpy_dtype_promotion("strict") and jax.numpy_rank_promotion("raise") (JAX's
    test suite runs under both) rlx_jax's own code (its rules, reference semantics, rlx_jax.nn)
    still runs, and the results compare as jax.jit's do: `5.0 == cond(...)` needs the weakly
    typed int32 result (lax_control_flow_test's testCondOneBranchConstant)."""
    f, args = STRICT[name]
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        got, want = rlx_jax.jit(f, backend=backend)(*args), jax.jit(f)(*args)
        _same(got, want)
        if name.startswith("cond"):
            assert (5.0 if args[0] < 3 else 4.0) == got
        with pytest.raises(jax.dtypes.TypePromotionError):   # the user's code: strict
            rlx_jax.jit(lambda x: x + jnp.int32(1), backend=backend)(np.float32(1))


# ---- PRNG keys ---------------------------------------------------------------------------------

def test_prng_key_arguments_pass_through(backend):
    """A typed key comes back a typed key, a raw uint32[2] key as its data (tests/test_random.py
    draws with them); keys of every implementation come back typed by it."""
    key = jax.random.key(0)
    out, x = rlx_jax.jit(lambda k, x: (k, x), backend=backend)(key, X)
    assert out.dtype == key.dtype
    np.testing.assert_array_equal(jax.random.key_data(out), jax.random.key_data(key))
    raw = jax.random.key_data(key)
    _close(rlx_jax.jit(lambda k: k, backend=backend)(raw), raw)
    rbg = jax.random.key(0, impl="rbg")
    out = rlx_jax.jit(lambda k: k, backend=backend)(rbg)
    assert out.dtype == rbg.dtype and out.shape == rbg.shape
    np.testing.assert_array_equal(jax.random.key_data(out), jax.random.key_data(rbg))


# ---- packaging ---------------------------------------------------------------------------------

def test_pyproject_license_is_an_spdx_expression():
    """setuptools >= 77 warns on the old `license = {text = ...}` table (once per build step)."""
    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in meta["build-system"]["requires"]


@pytest.mark.parametrize("seed", [2 ** 31, -2 ** 31 - 1, 2 ** 40])
def test_python_int_outside_int32_raises_overflow_as_jax_jit(seed):
    # jax.jit raises OverflowError for a Python int argument that int32 cannot hold
    with pytest.raises(OverflowError, match=str(seed)):
        jax.jit(lambda k: k + 1)(seed)
    with pytest.raises(OverflowError, match=f"Python int {seed} is outside int32"):
        rlx_jax.jit(lambda k: k + 1, backend="xla")(seed)
    assert int(rlx_jax.jit(lambda k: k + 1, backend="xla")(2 ** 31 - 1 if seed > 0 else
                                                           -2 ** 31)) == \
        int(jax.jit(lambda k: k + 1)(2 ** 31 - 1 if seed > 0 else -2 ** 31))


@pytest.mark.parametrize("args, kwargs", [(("hlo",), {}), (("stablehlo",), {}),
                                          ((), {"dialect": "stablehlo"}),
                                          ((), {"debug_info": True})])
def test_as_text_refuses_jax_compiler_levels(args, kwargs):
    lowered = rlx_jax.jit(lambda x: x + 1, backend="xla").lower(np.float32(1))
    with pytest.raises(rlx_jax.errors.BadArgumentError,
                       match=r"not StableHLO or HLO.*jax.jit\(f\).lower\(\*args\).as_text\(\)"):
        lowered.as_text(*args, **kwargs)
    assert "Binary[fn=add]" in lowered.as_text()          # rlx_jax's own levels still work


@pytest.mark.parametrize("backend", ["xla", "mlx", "coreml"])
def test_debug_nans_and_infs_raise_as_jax_jit(backend):
    f = rlx_jax.jit(lambda x: jnp.log(x), backend=backend)
    x = np.array([1.0, 0.0, -1.0], np.float32)     # log gives 0, -inf, nan
    with jax.debug_infs(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(inf\)"):
            f(x)
        np.testing.assert_allclose(f(np.float32([1.0, 2.0])), np.log([1.0, 2.0]), rtol=1e-6)
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\)"):
            f(x)
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\)"):
            jax.jit(jnp.log)(x)                 # the oracle: jax.jit raises there too
    assert np.isnan(np.asarray(f(x))[2])          # without the flags: no check


@pytest.mark.parametrize("backend", ["xla", "mlx", "coreml"])
def test_disable_jit_leaves_rlx_programs_on_their_backend(backend):
    def f(x):
        return lax.cond(x < 2, lambda x: 3. * x, lambda x: jnp.sin(x), x)
    jitted = rlx_jax.jit(f, backend=backend)
    with jax.disable_jit():
        got = jitted(1.)
        want = f(1.)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert len(jitted._cache) == 1          # compiled for the backend, not run as Python


def test_jax_typed_literals_are_weak_scalars():
    # jax 0.10 passes its typed Python scalars (TypedFloat, TypedInt) where it passes literals
    literals = pytest.importorskip("jax._src.literals")
    f = rlx_jax.jit(lambda a, b: a * 2 + b, backend="xla")
    a, b = literals.TypedFloat(1.5, np.dtype(np.float32)), literals.TypedInt(3, np.dtype(np.int32))
    got, want = f(a, b), jax.jit(lambda a, b: a * 2 + b)(a, b)
    assert (got.dtype, got.weak_type, float(got)) == (want.dtype, want.weak_type, float(want))


@pytest.mark.parametrize("dtype", ["float32", "uint32", "bfloat16", "complex64"])
def test_an_argument_returned_as_it_is_is_a_new_buffer(backend, dtype):
    """jax.jit's results never share an argument's buffer (JAX's testArrayCopy): neither do
    rlx_jax's, also where the argument only passes through the host (uint32, bfloat16 and
    complex64 on coreml)."""
    if dtype != "float32" and backend == "coreml":
        expect_host(f"Core ML holds no {dtype} values: those arguments pass through the host")
    x = jnp.ones(10, dtype=dtype)
    for fun in (jnp.asarray, jnp.copy, lambda v: (v, v + v)):
        got = jax.tree.leaves(rlx_jax.jit(fun, backend=backend)(x))[0]
        assert got.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(x))
