"""Constant folding (placement/fold.py): what reads no argument is evaluated once at compile
time by JAX on the CPU and becomes a constant of the program; it is listed in the placement;
`fold_constants=False` keeps it on the device; the limits (large results, control flow, PRNG
keys) are kept. Oracles: jax.jit's own values (bit for bit where the whole value folds) and
exact op lists."""
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.placement.fold import FOLD_ELEMENTS

BACKENDS = [b for b in ("mlx", "coreml") if b in rlx_jax.available_backends()]
TABLES = {   # programs of no argument JAX's tests compare with jax.jit at rtol 1e-6
    "pascal": lambda: jsl.pascal(12),
    "invpascal": lambda: jsl.invpascal(6, kind="lower"),
    "invhilbert": lambda: jsl.invhilbert(5),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_program_of_no_argument_is_jax_s_values(name, backend):
    """Given:  a table built through lgamma and exp from iota, no argument
       Result: folded whole: jax.jit's array bit for bit, and nothing left to run"""
    fn = TABLES[name]
    compiled = rlx_jax.jit(fn, backend=backend).lower().compile()
    placed = compiled.lowered.placement()
    assert placed.folded and placed.segments == [] and placed.host == {}
    np.testing.assert_array_equal(np.asarray(compiled()), np.asarray(jax.jit(fn)()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fold_constants_false_computes_it_on_the_device(backend):
    """Given:  pascal(12) with fold_constants=False
       Result: nothing folded, every op on the device, jax.jit's values within float32
               rounding of the backend's lgamma and exp"""
    fn = TABLES["pascal"]
    kept = rlx_jax.jit(fn, backend=backend, fold_constants=False).lower().compile()
    assert not kept.lowered.placement().folded
    rlx_jax.testing.assert_ran_on_device(kept)
    np.testing.assert_allclose(np.asarray(kept()), np.asarray(jax.jit(fn)()), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.host("complex64: MLX has no complex iota, Core ML no complex tensors")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_complex_dft_matrix_is_jax_s_values(backend):
    """Given:  jax.scipy.linalg.dft(8), no argument
       Result: folded: jax.jit's complex64 matrix bit for bit (Core ML, which has no complex
               tensors, forms it from the folded float32 parts on the host)"""
    fn = lambda: jsl.dft(8)                                      # noqa: E731
    placed = rlx_jax.jit(fn, backend=backend).lower().placement()
    assert {n.kind.name for n in placed.folded} >= {"Iota", "Activation"}
    assert [n.kind.name for n, _ in placed.host_ops()] == ([] if backend == "mlx" else
                                                            ["Complex"])
    np.testing.assert_array_equal(np.asarray(rlx_jax.jit(fn, backend=backend)()),
                                  np.asarray(jax.jit(fn)()))


def _masked(x):
    mask = jnp.tril(jnp.ones((4, 4), bool))
    return jnp.where(mask, x, -jnp.inf) + jnp.arange(4.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_what_reads_an_argument_runs_on_the_device(backend):
    """Given:  a causal mask and a position ramp (iota, compare, ...) next to x
       Result: the device segment holds exactly the Where and the add; the mask's ops are
               listed as folded; equal to jax.jit"""
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    compiled = rlx_jax.jit(_masked, backend=backend).lower(x).compile()
    placed = compiled.lowered.placement()
    (segment,) = placed.segments
    assert sorted(n.kind.name for n in segment.nodes) == ["Binary", "Where"]
    assert {"Iota", "Compare"} <= {n.kind.name for n in placed.folded}
    assert "folded at compile time" in str(placed)
    rlx_jax.testing.assert_ran_on_device(compiled)
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.asarray(jax.jit(_masked)(x)))
    off = rlx_jax.jit(_masked, backend=backend, fold_constants=False).lower(x)
    assert {"Iota", "Compare"} <= set(off.op_counts())


@pytest.mark.parametrize("backend", BACKENDS)
def test_limits_large_results_and_control_flow(backend):
    """Given:  a broadcast above FOLD_ELEMENTS, a fori_loop over constants, and normal noise
               from a constant key (threefry on uint32 words)
       Result: the broadcast, the loop and its initial carry (a loop reads it) stay on the
               device; the noise folds into JAX's own numbers; equal to jax.jit"""
    side = int(np.sqrt(FOLD_ELEMENTS)) + 1

    def fn(x):
        big = jnp.full((side, side), 2.0)                        # above the limit
        loop = jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0, jnp.ones(3))
        noise = jax.random.normal(jax.random.key(0), (3,))
        return x * big[:3, :3].sum() + loop, noise
    x = np.ones(3, np.float32)
    compiled = rlx_jax.jit(fn, backend=backend).lower(x).compile()
    counts = compiled.lowered.op_counts()
    assert counts.get("Expand", 0) == 2 and counts.get("While", 0) + counts.get("Scan", 0) == 1
    assert "Iota" in {n.kind.name for n in compiled.lowered.placement().folded}  # threefry counters
    got, want = compiled(x), jax.jit(fn)(x)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_the_xla_reference_does_not_fold():
    """XLA folds on its own: the reference backend's program is the traced one."""
    placed = rlx_jax.jit(lambda: jsl.pascal(4), backend="xla").lower().placement()
    assert placed.folded == [] and len(placed.segments) == 1


def test_a_bad_option_value_is_refused():
    with pytest.raises(errors.BadArgumentError, match="fold_constants"):
        rlx_jax.jit(jnp.sin, backend="xla", fold_constants="yes")
