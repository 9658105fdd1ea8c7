"""The MIL executor as the strictest reader of the MIL spec (coreml/executor/strict.py,
docs/mil-semantics.md): where the spec leaves a behaviour open (tie orders, NaN through the
max / min family, halves in round, signs of mod, ...) the executor takes the least convenient
reading, drawn from a seeded generator; the lowerings give JAX's results under every seed.

Raw MIL programs show the strict readings themselves; JAX programs on backend="coreml" show the
lowerings do not depend on them (exactly equal to jax.jit, every op on the device); the entries
of DEVICE_DIVERGENCES (tests/divergences_coreml.py) are shown as the executor exposing them."""
import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from jax import lax

import rlx_jax
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
from rlx_jax.backends.coreml.executor.ops import OVERRIDES
from rlx_jax.backends.coreml.executor.strict import strict
from rlx_jax.backends.coreml.mil.reduce import sort_exact
from tests.divergences_coreml import DEVICE_DIVERGENCES

SEEDS = (0, 1, 2, 3)
NAN, INF = np.nan, np.inf


def mil_executor(tmp_path, build, *shapes, dtype=ct.converters.mil.mil.types.fp32):
    """A raw MIL program (`build(*inputs)`), saved as an .mlpackage and loaded by the MIL
    reference executor (on macOS too)."""
    specs = [mb.TensorSpec(shape=s, dtype=dtype) for s in shapes]
    prog = mb.program(input_specs=specs, opset_version=ct.target.iOS16)(build)
    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS16,
                       skip_model_load=True)
    path = str(tmp_path / "raw.mlpackage")
    model.save(path)
    ex = MilReferenceExecutor(path)

    def run(*args, seed=0):
        with strict(seed=seed):
            out = ex(dict(zip(ex.input_names, args)))
        return [out[n] for n in ex.output_names]
    return run


def on_device(f, *args):
    """rlx_jax.jit(f, backend="coreml"), checked to place every op on the device."""
    fn = rlx_jax.jit(f, backend="coreml")
    assert fn.lower(*args).placement().device_only
    return fn


def strict_run(f, *args, seed=0, **settings):
    """f's Core ML program run by the strict MIL executor (on macOS too) under `seed`."""
    compiled = rlx_jax.jit(f, backend="coreml").lower(*args).compile()
    assert compiled.lowered.placement().device_only
    exe = compiled.executable
    ref = MilReferenceExecutor(exe.package_path)
    with strict(seed=seed, **settings):
        out = ref({n: np.asarray(a) for n, a in zip(exe.input_names, args)})
    return [out[n] for n in exe.output_names]


def assert_same(got, want):
    """Exactly JAX's: values (NaN where NaN), dtypes, and the sign of every zero (not of a
    NaN: Core ML's NaNs carry no sign JAX would see)."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if w.dtype.kind == "f":
            num = ~np.isnan(w)
            np.testing.assert_array_equal(np.signbit(g[num]), np.signbit(w[num]))


def check_seeds(f, *args):
    """f on Core ML equals jax.jit(f) exactly under every strict seed."""
    fn = on_device(f, *args)
    want = jax.jit(f)(*args)
    for seed in SEEDS:
        with strict(seed=seed):
            assert_same(fn(*args), want)


# ---- the strict readings, on raw MIL ----

def test_raw_argsort_of_equal_keys_is_a_random_permutation(tmp_path):
    """Given:  a raw MIL argsort (ascending and descending) of 64 equal float32 keys
       Result: a permutation that is not the identity, the same on every call with one seed,
               different across seeds: the executor gives ties no order (the spec gives none;
               a lowering relying on a stable argsort fails here)"""
    run = mil_executor(tmp_path, lambda x: (mb.argsort(x=x, axis=0, ascending=True),
                                            mb.argsort(x=x, axis=0, ascending=False)), (64,))
    x = np.zeros(64, np.float32)
    seen = set()
    for seed in SEEDS:
        for order in run(x, seed=seed):
            assert sorted(order.tolist()) == list(range(64))
            assert order.tolist() != list(range(64))
            seen.add(tuple(order))
        assert [o.tolist() for o in run(x, seed=seed)] == [o.tolist() for o in run(x, seed=seed)]
    assert len(seen) == 2 * len(SEEDS)
    ramp = np.arange(64, dtype=np.float32)[::-1].copy()      # distinct keys: sorted, always
    assert run(ramp)[0].tolist() == list(range(64))[::-1]


def test_raw_reduce_argmax_of_ties_is_any_index(tmp_path):
    """Given:  a raw MIL reduce_argmax / reduce_argmin over rows of equal values
       Result: not always the first index ("the identity of the return value is not
               guaranteed"); a unique best is found"""
    run = mil_executor(tmp_path, lambda x: (mb.reduce_argmax(x=x, axis=1),
                                            mb.reduce_argmin(x=x, axis=1)), (8, 16))
    x = np.ones((8, 16), np.float32)
    firsts = [int((a == 0).all() and (b == 0).all()) for a, b in (run(x, seed=s) for s in SEEDS)]
    assert not any(firsts)
    y = x.copy()
    y[:, 5], y[:, 9] = 2, 0
    a, b = run(y)
    assert (a == 5).all() and (b == 9).all()


def test_raw_strict_readings_of_the_ops_the_spec_leaves_open(tmp_path):
    """Given:  maximum, minimum, reduce_max, relu, round, sign, mod, cast, max_pool evaluated
               by the executor's overrides
       Result: NaN dropped by the max / min family; max_pool pads with 0; round sends halves
               other than 0.5 either way; sign(NaN) is +-1; mod's sign convention and casts of
               fractions vary with the seed"""
    nan1 = np.array([NAN, 1.0, NAN], np.float32)
    one_nan = np.array([1.0, NAN, NAN], np.float32)
    for op in ("maximum", "minimum"):
        np.testing.assert_array_equal(OVERRIDES[op](x=nan1, y=one_nan), [1, 1, NAN])
    np.testing.assert_array_equal(OVERRIDES["reduce_max"](x=nan1, axes=[0]), 1)
    np.testing.assert_array_equal(OVERRIDES["relu"](x=nan1), [0, 1, 0])
    x = -np.ones((1, 1, 3), np.float32)
    np.testing.assert_array_equal(OVERRIDES["max_pool"](x=x, kernel_sizes=[2], strides=[1],
                                                        pad_type="custom", pad=[1, 0]),
                                  [[[0, -1, -1]]])
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.5, -2.5, 4.5], np.float32)
    rounded = set()
    for seed in SEEDS:
        with strict(seed=seed):
            r = OVERRIDES["round"](x=halves)
            assert r[0] == 0 and np.all(np.abs(r - halves) == 0.5)
            rounded.add(tuple(r.tolist()))
            s = OVERRIDES["sign"](x=np.array([NAN, -0.0], np.float32))
            assert abs(s[0]) == 1 and s[1] == 0 and not np.signbit(s[1])
    assert len(rounded) > 1
    mods = set()
    casts = set()
    for seed in SEEDS:
        with strict(seed=seed):
            mods.add(tuple(OVERRIDES["mod"](x=np.array([-7, 7, -5, 5] * 4, np.int32),
                                            y=np.array([2, -2, 3, -3] * 4, np.int32)).tolist()))
            casts.add(tuple(OVERRIDES["cast"](x=np.array([2.5, -2.5, 0.25] * 4, np.float32),
                                              dtype="int32").tolist()))
    assert len(mods) > 1 and len(casts) > 1


def test_previous_stable_argsort_top_k_breaks_under_the_strict_executor(tmp_path):
    """Given:  the top_k lowering before the executor was strict, as a raw MIL program: two
               chained descending argsorts (by a tie key, then by value) that need a stable
               argsort; x with many equal values
       Result: under some seed its indices differ from lax.top_k's; the current lowering
               (rlx_jax.jit on Core ML) equals lax.top_k under every seed"""
    def old_top_k(x):
        zero = mb.equal(x=x, y=0.0)
        pos_zero = mb.logical_and(x=zero, y=mb.greater(x=mb.real_div(x=1.0, y=x), y=0.0))
        tie = mb.cast(x=pos_zero, dtype="int32")
        first = mb.argsort(x=tie, axis=-1, ascending=False)
        key = mb.gather_along_axis(x=x, indices=first, axis=-1)
        order = mb.argsort(x=key, axis=-1, ascending=False)
        return mb.gather_along_axis(x=first, indices=order, axis=-1)
    run = mil_executor(tmp_path, old_top_k, (4, 12))
    x = np.random.RandomState(0).randint(0, 3, (4, 12)).astype(np.float32)
    want = np.asarray(lax.top_k(x, 12)[1])
    assert any(not np.array_equal(run(x, seed=s)[0], want) for s in SEEDS)
    check_seeds(lambda x: lax.top_k(x, 12), x)


# ---- ties: sort, argsort, top_k, argmax equal JAX under every seed ----

def _ties(kind, shape, seed=0):
    r = np.random.RandomState(seed)
    if kind == "all_equal":
        return np.full(shape, 2.0, np.float32)
    if kind == "few_values":
        return r.randint(-2, 3, shape).astype(np.float32)
    if kind == "signed_zeros":
        return r.choice(np.array([0.0, -0.0, 1.0], np.float32), shape)
    if kind == "nan_inf":
        return r.choice(np.array([NAN, INF, -INF, 0.0, -0.0, 1.0], np.float32), shape)
    if kind == "int":
        return r.randint(0, 3, shape).astype(np.int32)
    if kind == "bool":
        return r.rand(*shape) > 0.5
    raise ValueError(kind)


PATTERNS = ("all_equal", "few_values", "signed_zeros", "nan_inf", "int", "bool")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("fn", ["sort0", "sort1", "argsort", "argsort_desc", "top_k",
                                "top_k_all", "argmax", "argmin"])
def test_ties_equal_jax_under_every_seed(fn, pattern):
    """Given:  sort along either axis, stable argsort (ascending, descending), top_k (k = 3
               and k = n), argmax and argmin of (5, 9) arrays full of equal keys: all equal,
               few values, +0 / -0, NaN / inf, int32, bool
       Result: exactly jax.jit's (ties in index order, -0 and NaN placed as JAX places them)
               under every seed of the executor's tie order, every op on the device"""
    x = _ties(pattern, (5, 9))
    if pattern == "bool" and fn in ("argsort_desc", "top_k", "top_k_all"):
        x = x.astype(np.int32)
    f = {"sort0": lambda x: jnp.sort(x, axis=0), "sort1": lambda x: jnp.sort(x, axis=1),
         "argsort": lambda x: jnp.argsort(x, axis=1, stable=True),
         "argsort_desc": lambda x: jnp.argsort(x, axis=0, stable=True, descending=True),
         "top_k": lambda x: lax.top_k(x, 3), "top_k_all": lambda x: lax.top_k(x, 9),
         "argmax": lambda x: jnp.argmax(x, axis=1), "argmin": lambda x: jnp.argmin(x, axis=0)}
    check_seeds(f[fn], x)


@pytest.mark.parametrize("pattern", ("few_values", "nan_inf", "int"))
def test_multi_operand_and_multi_key_sorts_with_ties_equal_jax(pattern):
    """Given:  lax.sort of (keys, values) with num_keys=1, and of (k1, k2, values) with
               num_keys=2, keys full of ties
       Result: jax.jit's, every operand permuted alike, under every seed"""
    k1, k2 = _ties(pattern, (3, 16), 1), _ties(pattern, (3, 16), 2)
    v = np.arange(48, dtype=np.float32).reshape(3, 16)
    check_seeds(lambda k, v: lax.sort((k, v), dimension=1, num_keys=1), k1, v)
    check_seeds(lambda a, b, v: lax.sort((a, b, v), dimension=1, num_keys=2), k1, k2, v)


def test_max_pool_backward_with_ties_equal_jax():
    """Given:  jax.grad of a 2x2 / stride 2 max pool (MaxPool2dBackward) and of an
               overlapping 3x3 / stride 2 one (select_and_scatter_add) over x with many ties
       Result: the cotangent goes to the first maximum of each window as in JAX, under every
               seed (MIL's reduce_argmax promises no tie order)"""
    x = np.random.RandomState(0).randint(0, 2, (2, 3, 8, 8)).astype(np.float32)

    def loss(win, stride):
        return lambda x: jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, win, win),
                                                   (1, 1, stride, stride), "VALID") ** 2)
    check_seeds(jax.grad(loss(2, 2)), x)
    check_seeds(jax.grad(loss(3, 2)), x)


# ---- NaN through max / min, halves in round, signs ----

NANS = np.array([[NAN, 1.0, -INF, 0.0, NAN, -2.0], [2.0, NAN, NAN, INF, -1.0, 0.5]], np.float32)


@pytest.mark.parametrize("name,f", [
    ("max", lambda x: lax.max(x, x[::-1])), ("min", lambda x: lax.min(x, x[:, ::-1])),
    ("max_const", lambda x: jnp.maximum(x, 0.5)), ("min_const", lambda x: jnp.minimum(-1.0, x)),
    ("relu", jax.nn.relu), ("rlx_relu", rlx_jax.nn.relu),
    ("clamp", lambda x: lax.clamp(-1.0, x, 1.0)),
    ("reduce_max", lambda x: jnp.max(x, axis=1)), ("reduce_min", lambda x: jnp.min(x, axis=0)),
    ("cummax", lambda x: lax.cummax(x, axis=1)),
    ("cummin_reverse", lambda x: lax.cummin(x, axis=1, reverse=True)),
    ("max_pool", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2), (1, 2), "VALID")),
    ("max_pool_padded", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3), (1, 2),
                                                    ((0, 0), (1, 1)))),
    ("min_pool", lambda x: lax.reduce_window(x, jnp.inf, lax.min, (2, 2), (1, 1), "VALID")),
    ("max_pool_dilated", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2), (1, 1),
                                                     "VALID", window_dilation=(1, 2))),
    ("scatter_max", lambda x: x.at[:, jnp.array([0, 2, 2])].max(jnp.array([3.0, NAN, 0.0]))),
    ("sign", jnp.sign),
])
def test_nan_through_max_min_equal_jax(name, f):
    """Given:  max / min of two arrays and with a constant, relu (JAX's and rlx_jax.nn's),
               clamp, max / min reductions, cumulative max / min, max pools (native, padded,
               dilated), a min pool, scatter max, sign, over x with NaN, inf and zeros
       Result: exactly jax.jit's (NaN wherever JAX propagates it) under every seed: MIL's
               max / min family drops a NaN on the strict executor"""
    check_seeds(f, NANS)


def test_round_halves_equal_jax():
    """Given:  jnp.round (half to even) and lax.round (half away from zero) of every half in
               [-4.5, 4.5], non-halves, -0.0, +-inf and NaN
       Result: exactly JAX's under every seed (MIL's round only promises 0.5 -> 0)"""
    x = np.concatenate([np.arange(-4.5, 5, 1.0), [0.3, -0.3, -0.0, 2.7, INF, -INF, NAN]])
    x = x.astype(np.float32)
    check_seeds(jnp.round, x)
    check_seeds(lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), x)
    check_seeds(lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), x)


def test_integer_division_by_zero_and_signs_equal_jax():
    """Given:  lax.div / lax.rem / jnp.floor_divide / jnp.remainder of int32 operands of every
               sign, divisors 0 included
       Result: JAX's (x / 0 = -1, x % 0 = x) under every seed: MIL leaves division by zero
               and mod's sign convention open"""
    x = np.array([[7, -7, 7, -7, 0, 5], [1, -9, 0, 5, 3, -3]], np.int32)
    y = np.array([[2, 2, -2, -2, 0, 0], [3, 4, 5, -6, 0, 7]], np.int32)
    check_seeds(lambda x, y: (lax.div(x, y), lax.rem(x, y)), x, y)
    nz = np.where(y == 0, 3, y).astype(np.int32)
    check_seeds(lambda x, y: (jnp.floor_divide(x, y), jnp.remainder(x, y)), x, nz)


def test_pow_exact_cases_equal_jax():
    """Given:  lax.pow at IEEE 754's exact cases (x ** 0 for NaN x, 1 ** NaN, (-1) ** inf)
       Result: JAX's 1 under every seed (the strict executor's pow makes them NaN)"""
    x = np.array([NAN, 1.0, -1.0, -1.0, 2.0, -2.0], np.float32)
    y = np.array([0.0, NAN, INF, -INF, 0.5, 3.0], np.float32)
    check_seeds(lax.pow, x, y)


# ---- structure and the exact-tie limit ----

def test_sort_of_1000_floats_is_tie_free_without_reduce_argmax():
    """Given:  jnp.sort of f32[1000]
       Result: two argsorts (the key, then class * n + index), one cumsum (the classes), 19
               MIL ops in all, no topk or reduce_argmax"""
    x = np.zeros(1000, np.float32)
    ops = on_device(jnp.sort, x).lower(x).op_counts(level="backend")
    assert ops == {"add": 2, "argsort": 2, "cast": 2, "concat": 1, "cumsum": 1,
                   "gather_along_axis": 4, "mul": 2, "not_equal": 2,
                   "select": 1, "slice_by_index": 2}


def test_the_tie_free_key_limit_is_int32():
    """Given:  the class * n + index key of an axis of n elements
       Result: exact up to 32,767 elements of a float key (2n classes) and 46,340 of an
               integer key (n classes): the key stays within int32"""
    assert sort_exact(32767, 2 * 32767) and not sort_exact(32768, 2 * 32768)
    assert sort_exact(46340, 46340) and not sort_exact(46341, 46341)


@pytest.mark.host("a sort by two keys along more than 46,340 elements is refused on Core ML "
                  "(its joint key would leave int32)", backends=("coreml",))
def test_multi_key_sort_of_a_long_axis_runs_on_the_host():
    """Given:  lax.sort by two int32 keys along 50,000 elements
       Result: the Sort runs on the host with the reason; the result is JAX's"""
    r = np.random.RandomState(0)
    a, b = r.randint(0, 3, 50000).astype(np.int32), r.randint(0, 3, 50000).astype(np.int32)
    f = lambda a, b: lax.sort((a, b), num_keys=2)           # noqa: E731
    fn = rlx_jax.jit(f, backend="coreml")
    ops = fn.lower(a, b).placement().host_ops()
    assert [n.kind.name for n, _ in ops] == ["Sort"] and "2 keys" in ops[0][1]
    assert_same(fn(a, b), jax.jit(f)(a, b))


# ---- DEVICE_DIVERGENCES: each entry, exposed by the strict executor ----

def test_device_divergence_sort_long_axis_ties():
    """Given:  stable jnp.argsort and jnp.sort of 40,000 float32 values with many ties (above
               the tie-free key's 32,767)
       Result: every op on the device; sorted values JAX's; the indices of equal keys differ
               from JAX's under some seed (DEVICE_DIVERGENCES['sort_long_axis_ties'])"""
    x = np.random.RandomState(0).randint(0, 5, 40000).astype(np.float32)
    want = np.asarray(jnp.argsort(x, stable=True))
    got = [strict_run(jnp.argsort, x, seed=s)[0] for s in SEEDS[:2]]
    assert all(np.array_equal(x[g], x[want]) for g in got)
    assert any(not np.array_equal(g, want) for g in got)
    np.testing.assert_array_equal(strict_run(jnp.sort, x)[0], np.sort(x))
    assert "tie order unspecified on Core ML" in DEVICE_DIVERGENCES["sort_long_axis_ties"].reason


def test_device_divergence_top_k_long_axis_ties():
    """Given:  lax.top_k(x, 8) of 40,000 float32 values, the largest repeated
       Result: every op on the device; the values are JAX's, the indices differ under some
               seed (DEVICE_DIVERGENCES['top_k_long_axis_ties'])"""
    x = np.random.RandomState(1).randint(0, 5, 40000).astype(np.float32)
    vals, idx = (np.asarray(a) for a in lax.top_k(x, 8))
    got = [strict_run(lambda x: lax.top_k(x, 8), x, seed=s) for s in SEEDS[:2]]
    assert all(np.array_equal(v, vals) for v, _ in got)
    assert any(not np.array_equal(i, idx) for _, i in got)


def test_device_divergence_int32_overflow():
    """Given:  x + y and x * y of int32 values that overflow (op-table case add_mul_i32_wrap)
       Result: JAX's wrapped values with the executor's default; garbage where the executor
               poisons an overflow, as the MIL spec allows (DEVICE_DIVERGENCES['int32_overflow'])"""
    x = np.array([2 ** 31 - 1, -2 ** 31, 65536, -7], np.int32)
    y = np.array([1, -1, 65536, 3], np.int32)
    f = lambda x, y: (x + y, x * y)                          # noqa: E731
    want = [np.asarray(w) for w in jax.jit(f)(x, y)]
    assert_same(strict_run(f, x, y), want)
    poisoned = strict_run(f, x, y, int_overflow="poison")
    assert not all(np.array_equal(g, w) for g, w in zip(poisoned, want))
    np.testing.assert_array_equal(poisoned[0][3], want[0][3])      # no overflow: exact


def test_device_divergence_max_pool_backward_nan_window():
    """Given:  jax.grad of a 4-wide max pool over [3, NaN, 1, 2]
       Result: JAX's chain of >= selects 2 (the NaN breaks it); the Core ML kernel routes the
               cotangent to the first maximum of the numbers, 3
               (DEVICE_DIVERGENCES['max_pool_backward_nan_window'])"""
    x = np.array([[[[3.0, NAN, 1.0, 2.0]]]], np.float32)
    f = jax.grad(lambda x: jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 1, 4),
                                                     (1, 1, 1, 4), "VALID")))
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)).ravel(), [0, 0, 0, 1])
    np.testing.assert_array_equal(strict_run(f, x)[0].ravel(), [1, 0, 0, 0])


def test_device_divergence_max_min_signed_zero():
    """Given:  lax.max(+0, -0) and lax.min(+0, -0)
       Result: zeros, but not JAX's signs (max +0, min -0): MIL's formulas give y (maximum)
               and x (minimum) for equal operands (DEVICE_DIVERGENCES['max_min_signed_zero'])"""
    x, y = np.array([0.0], np.float32), np.array([-0.0], np.float32)
    f = lambda x, y: (lax.max(x, y), lax.min(x, y))             # noqa: E731
    got, want = strict_run(f, x, y), jax.jit(f)(x, y)
    assert not np.signbit(want[0][0]) and np.signbit(want[1][0])
    assert got[0][0] == 0 and np.signbit(got[0][0])
    assert got[1][0] == 0 and not np.signbit(got[1][0])


def test_every_device_divergence_is_shown():
    """Every DEVICE_DIVERGENCES entry has its test_device_divergence_<name> here."""
    missing = [k for k in DEVICE_DIVERGENCES if f"test_device_divergence_{k}" not in globals()]
    assert not missing, missing
