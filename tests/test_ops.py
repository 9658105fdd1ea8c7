"""Every op-table case on every available backend, against JAX on CPU."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors

from .conftest import BACKENDS
from .divergences import divergence
from .where_ran import expect_host
from .op_table import CASES


def _np(x):
    """numpy view of a result (MLX bfloat16 arrays have no buffer protocol for np.asarray)."""
    if type(x).__module__.startswith("mlx"):
        from rlx_jax.backends.mlx.runtime import to_numpy
        return to_numpy(x)
    return np.asarray(x)


def _close(got, want, atol, rtol, what):
    got, want = _np(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if want.dtype == np.bool_ or jnp.issubdtype(want.dtype, jnp.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    elif jnp.issubdtype(want.dtype, jnp.complexfloating):
        np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128),
                                   atol=atol, rtol=rtol, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   atol=atol, rtol=rtol, err_msg=what)


def _run(case, backend, fn, args, **options):
    return rlx_jax.jit(fn, backend=backend, static_argnums=case.static_argnums, **options)(*args)


def _loss(fn):
    def loss(*a):   # every floating output contributes
        outs = [o for o in jax.tree.leaves(fn(*a)) if jnp.issubdtype(o.dtype, jnp.floating)]
        return sum(jnp.sum(o) for o in outs)
    return loss


@functools.lru_cache(maxsize=None)
def _oracle(case):
    """JAX on CPU: (outputs, gradient or None) of one case, computed once for all backends."""
    args = case.args(np.random.RandomState(0))

    def both(*a):
        return case.fn(*a), (jax.grad(_loss(case.fn))(*a) if case.grad else None)
    return jax.jit(both, static_argnums=case.static_argnums)(*args)


def _host_ops(placement):
    return [f"{n.kind.name}{n.attr_text()}: {why}" for n, why in placement.host_ops()]


def check_case(case, backend, **options):
    """Runs `case` through rlx_jax.jit on `backend` (with backend `options`) and compares with
    JAX, honouring the backend's recorded divergence for the case: a case recorded as `host`
    must place ops on the host (and be refused with fallback="error"); every other case must
    run entirely on the device."""
    args = case.args(np.random.RandomState(0))
    div = divergence(case, backend)
    if div is not None and div.error:
        with pytest.raises(getattr(errors, div.error)):
            _run(case, backend, case.fn, args, fallback="error", **options)
        if div.error != "ArgumentRangeError":
            return
        expect_host(div.reason)       # fallback="host": such a call runs on the host
        options = dict(options, fallback="host")
    atol = div.atol if div is not None and div.atol is not None else case.atol
    rtol = div.rtol if div is not None and div.rtol is not None else case.rtol
    want, gwant = _oracle(case)
    jitted = rlx_jax.jit(case.fn, backend=backend, static_argnums=case.static_argnums,
                         **options)
    lowered = jitted.lower(*args)
    host = _host_ops(lowered.placement())
    if div is not None and div.host:
        assert host, f"{case.name}: recorded as host-placed on {backend}, but runs on the device"
        expect_host(div.reason)
        with pytest.raises(errors.LegalizationError):
            _run(case, backend, case.fn, args, fallback="error", **options)
    else:
        assert not host, f"{case.name}: ops placed on the host on {backend}: {host}"
    static = set(case.static_argnums)
    got = lowered.compile()(*[a for i, a in enumerate(args) if i not in static])
    jax.tree.map(lambda g, w: _close(g, w, atol, rtol, case.name), got, want)
    if case.grad:
        ggot = _run(case, backend, jax.grad(_loss(case.fn)), args, **options)
        _close(ggot, gwant, atol * 10, rtol * 10, case.name + " grad")


# On a fresh kernel cache mx.compile's C++ build costs ~0.5 s per new program (g++), which for
# the whole table is most of the suite's time. The extended step checks every case with MLX
# evaluating the same lowered graph eagerly, and every COMPILED_EVERY-th case compiled; the slow
# step runs the whole table compiled.
FAST_OPTIONS = {"mlx": {"compile": False}}
COMPILED_EVERY = 8


# mlx and coreml run the table in the 'extended tests' step; the xla column and the compiled
# sample (every COMPILED_EVERY-th case, below) are sampled into the default run like every
# parametrized test (tests/conftest.py), the rest running in the extended step.
_TABLE_BACKENDS = [b if b == "xla" else pytest.param(b, marks=pytest.mark.extended)
                   for b in BACKENDS]


@pytest.mark.parametrize("backend", _TABLE_BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op(case, backend):
    check_case(case, backend, **FAST_OPTIONS.get(backend, {}))


_COMPILED = [b for b in BACKENDS if b in FAST_OPTIONS]


@pytest.mark.parametrize("backend", _COMPILED)
@pytest.mark.parametrize("case", CASES[::COMPILED_EVERY], ids=lambda c: c.name)
def test_op_compiled_sample(case, backend):
    check_case(case, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", _COMPILED)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_compiled(case, backend):
    check_case(case, backend)
