"""JAX primitives with no rlx_jax rule (some special functions, host callbacks, and any other
primitive without effects, e.g. one defined here) run as JAX on the host (OpKind.HostPrimitive)
on every backend, with their gradients; with fallback="error" they are refused naming each, and
effectful ones, and those refused by name (io_callback, ...), are refused either way. Oracle:
JAX on CPU."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src import core as jax_core, effects
from jax.extend.core import Primitive
from jax.interpreters import mlir

import rlx_jax
from rlx_jax import errors
from rlx_jax.ir import host as ir_host
from rlx_jax.ir.ops import OpKind as K

from .conftest import BACKENDS

pytestmark = pytest.mark.host("JAX primitives with no RLX kind run on the host by design")

R = np.random.RandomState(0)
A = (R.rand(6).astype(np.float32) + 0.5)
X = (R.rand(6).astype(np.float32) * 3)


def incomplete_gamma(a, x):
    return jnp.sum(jax.scipy.special.gammainc(a, x) * x)


def _close(got, want, tol=1e-5):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_function_and_its_gradient(backend):
    """igamma (and, in its gradient in a, igamma_grad_a) has no RLX kind: both run on the host."""
    for fn in (incomplete_gamma, jax.grad(incomplete_gamma, argnums=(0, 1))):
        f = rlx_jax.jit(fn, backend=backend)
        _close(f(A, X), jax.jit(fn)(A, X), 1e-4)
        host = f.lower(A, X).placement().host_ops()
        names = {str(n.attrs["primitive"]) for n, _ in host if n.kind is K.HostPrimitive}
        if backend == "xla":
            assert not host           # the reference runs JAX primitives itself
        else:
            assert "igamma" in names, names
            assert fn is incomplete_gamma or "igamma_grad_a" in names, names


@pytest.mark.parametrize("backend", BACKENDS)
def test_pure_callback_runs_on_the_host(backend):
    def f(x):
        y = jax.pure_callback(lambda a: np.sort(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y * 2
    x = R.randn(7).astype(np.float32)
    _close(rlx_jax.jit(f, backend=backend)(x), np.sort(x) * 2)


def test_fallback_error_refuses_them_naming_each():
    with pytest.raises(errors.UnsupportedPrimitiveError) as info:
        rlx_jax.jit(jax.grad(incomplete_gamma), backend="mlx" if "mlx" in BACKENDS else "xla",
                    fallback="error")(A, X)
    msg = str(info.value)
    assert "igamma ×1" in msg and "igamma_grad_a" in msg and "test_host_primitives.py" in msg
    assert "run as JAX on the host with fallback='host'" in msg


def test_the_placement_report_names_the_primitive():
    if "coreml" not in BACKENDS:
        pytest.skip("coreml is not available here")
    text = str(rlx_jax.jit(incomplete_gamma, backend="coreml").lower(A, X).placement())
    assert "HostPrimitive[primitive=igamma" in text
    assert "the JAX primitive `igamma` (this special function has no RLX kind yet)" in text


# ---- a primitive rlx_jax has never heard of ----------------------------------------------------

def _affine_impl(x):
    return x * 2.0 + 1.0


affine_p = Primitive("rlx_test_affine")          # no effects: kept as a HostPrimitive
affine_p.def_impl(_affine_impl)
affine_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(affine_p, mlir.lower_fun(_affine_impl, multiple_results=False))


class _TestEffect(effects.Effect):
    pass


effects.lowerable_effects.add_type(_TestEffect)
effectful_p = Primitive("rlx_test_effectful")    # has an effect: refused
effectful_p.def_impl(_affine_impl)
effectful_p.def_effectful_abstract_eval(lambda x: (x, {_TestEffect()}))
mlir.register_lowering(effectful_p, mlir.lower_fun(_affine_impl, multiple_results=False))


def uses_affine(x):
    return jnp.sin(affine_p.bind(x * 3.0)) - x


def _host_primitives(lowered):
    return {str(n.attrs["primitive"]): why for n, why in lowered.placement().host_ops()
            if n.kind is K.HostPrimitive}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_primitive_with_no_rule_runs_on_the_host(backend):
    """Given: rlx_test_affine (impl, abstract eval, MLIR lowering; no rlx_jax rule, no effects).
    Result: with fallback="host" (the default) it is a HostPrimitive, bound as JAX binds it, in
    a host segment reported with its reason; the rest runs on the device; results are JAX's."""
    f = rlx_jax.jit(uses_affine, backend=backend)
    _close(f(X), jax.jit(uses_affine)(X))
    host = _host_primitives(f.lower(X))
    if backend == "xla":
        assert not host
    else:
        assert set(host) == {"rlx_test_affine"}, host
        assert "no rlx_jax rule for JAX primitive rlx_test_affine" in host["rlx_test_affine"]
        assert not f.lower(X).placement().device_only


def test_a_primitive_with_no_rule_is_refused_by_name_with_fallback_error():
    with pytest.raises(errors.UnsupportedPrimitiveError) as info:
        rlx_jax.jit(uses_affine, backend="xla", fallback="error")(X)
    msg = str(info.value)
    assert "rlx_test_affine ×1 (no rlx_jax rule for JAX primitive rlx_test_affine)" in msg, msg
    assert "test_host_primitives.py:" in msg and "(uses_affine)" in msg, msg
    assert "rlx_test_affine run as JAX on the host with fallback='host'" in msg, msg


def test_an_effectful_primitive_with_no_rule_is_refused_by_name():
    """Host segments do not keep effects: refused with fallback="host" too, naming the effect."""
    f = rlx_jax.jit(lambda x: effectful_p.bind(x) + 1.0, backend="xla")
    with pytest.raises(errors.UnsupportedPrimitiveError) as info:
        f(X)
    msg = str(info.value)
    assert "rlx_test_effectful ×1" in msg and "_TestEffect" in msg, msg
    assert "run as JAX on the host with fallback='host'" not in msg, msg


def test_refused_primitives_keep_their_refusal():
    """io_callback (like rng_uniform, all_to_all, shard_map) is refused by
    name with its reason, even with fallback="host"."""
    def f(x):
        return jax.experimental.io_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype),
                                            x) * 2
    with pytest.raises(errors.UnsupportedPrimitiveError, match="io_callback orders its effects"):
        rlx_jax.jit(f, backend="xla")(X)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_primitive_holding_a_sub_jaxpr_runs_on_the_host(backend):
    """custom_vmap_call keeps its function as a ClosedJaxpr param: bound again as it is."""
    @jax.custom_batching.custom_vmap
    def g(x):
        return jnp.sin(x) * 2.0

    @g.def_vmap
    def _rule(axis_size, in_batched, x):
        return jnp.sin(x) * 2.0, in_batched[0]

    f = rlx_jax.jit(lambda x: g(x) + 1.0, backend=backend)
    _close(f(X), jnp.sin(X) * 2.0 + 1.0)
    assert backend == "xla" or "custom_vmap_call" in _host_primitives(f.lower(X))


def test_host_binding_of_a_call_primitive_goes_through_its_bind_params():
    """A call-like primitive's params (call_jaxpr) are not what its bind takes: ir/host.bind
    turns them into its bind's as jax.core.eval_jaxpr does (get_bind_params)."""
    closed = jax.make_jaxpr(lambda a: jnp.sin(a) * 2.0)(X)
    params = ir_host.HostParams({"call_jaxpr": closed}, "a call primitive")
    out, = ir_host.bind(X, primitive=jax_core.closed_call_p, params=params)
    _close(out, np.sin(X) * 2.0)


# ---- lax.dce_sink: a rule that drops it --------------------------------------------------------

@pytest.mark.parametrize("prevent_mlir_dce", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dce_sink_is_dropped(backend, prevent_mlir_dce):
    """lax.dce_sink (JAX's own tests; checkify puts it in while bodies) keeps a value alive for
    JAX's dead-code elimination and has no results: nothing to run, on the device."""
    def f(x):
        y = jnp.exp(x)
        lax.dce_sink(y, prevent_mlir_dce=prevent_mlir_dce)
        return x * 2.0
    assert "dce_sink" in str(jax.make_jaxpr(f)(X))
    jitted = rlx_jax.jit(f, backend=backend)
    _close(jitted(X), X * 2.0)
    lowered = jitted.lower(X)
    assert lowered.placement().device_only
    assert K.Activation not in lowered.graph.kinds()     # the sunk exp is dead code


@pytest.mark.parametrize("backend", BACKENDS)
def test_debug_print_prints_on_every_call(backend, capfd):
    # an effectful host op with no results must run, not be removed as dead code
    def f(x):
        jax.debug.print("rlx-x={}", x)
        return x + 1
    jitted = rlx_jax.jit(f, backend=backend)
    for v in (1.0, 2.0):
        assert float(jitted(np.float32(v))) == v + 1
    jax.effects_barrier()
    printed = [ln for ln in capfd.readouterr().out.splitlines() if ln.startswith("rlx-x=")]
    assert printed == ["rlx-x=1.0", "rlx-x=2.0"]


# ---- a rule that keeps some of its primitive's params on the host ------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_window_with_a_general_body_over_a_large_window_runs_on_the_host(backend):
    """A general reduce_window body is unrolled over the window's elements (frontend/rules/
    conv.py); past MAX_WINDOW of them the primitive is kept as it is, on the host, with the
    reason; with fallback="error" it is refused by name."""
    from rlx_jax.frontend.rules.conv import MAX_WINDOW
    x = R.randn(12, 12).astype(np.float32)

    def f(x):
        return lax.reduce_window(x, 0.0, lambda a, b: a * 0.5 + b * b, (9, 9), (1, 2), "SAME")
    assert 9 * 9 > MAX_WINDOW
    jitted = rlx_jax.jit(f, backend=backend)
    _close(jitted(x), jax.jit(f)(x), 1e-4)
    host = jitted.lower(x).placement().host_ops()
    if backend == "xla":
        assert not host           # the reference runs JAX primitives itself
    else:
        assert [str(n.attrs["primitive"]) for n, _ in host] == ["reduce_window"]
        assert "81 elements" in host[0][1]
    with pytest.raises(errors.UnsupportedPrimitiveError, match=r"reduce_window ×1 \(reduce_"
                       r"window with a general body over windows of 81 elements"):
        rlx_jax.jit(f, backend=backend, fallback="error")(x)
    small = lambda x: lax.reduce_window(x, 0.0, lambda a, b: a * 0.5 + b * b, (2, 2), (1, 1),
                                        "VALID")
    assert rlx_jax.jit(small, backend=backend, fallback="error").lower(x).placement() \
        .device_only


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_with_a_general_body_runs_on_the_host(backend):
    # a two-operand lax.reduce (value and index of the max, as lax_autodiff_test's pair
    # reduce) has no RLX kind: kept as it is, on the host; refused by name with fallback="error"
    x = R.randn(3, 5).astype(np.float32)
    idx = np.broadcast_to(np.arange(5, dtype=np.int32), (3, 5))

    def body(a, b):
        keep = a[0] >= b[0]
        return lax.select(keep, a[0], b[0]), lax.select(keep, a[1], b[1])

    def f(x, i):
        return lax.reduce((x, i), (np.float32(-np.inf), np.int32(0)), body, (1,))
    jitted = rlx_jax.jit(f, backend=backend)
    for g, w in zip(jitted(x, idx), jax.jit(f)(x, idx)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    host = jitted.lower(x, idx).placement().host_ops()
    assert [str(n.attrs["primitive"]) for n, _ in host] == ([] if backend == "xla" else
                                                            ["reduce"])
    with pytest.raises(errors.UnsupportedPrimitiveError, match="lax.reduce with this body"):
        rlx_jax.jit(f, backend=backend, fallback="error")(x, idx)
