"""jax.random inside rlx_jax.jit: every sampler bit for bit equal to jax.jit of the same function,
on every backend, both key styles, several dtypes and shapes, partitionable threefry on and off.

Oracle: `jax.jit(fn)` on the CPU, compared with np.testing.assert_array_equal (floats too).
Where a backend's float math differs from XLA CPU's (erf_inv, log, exp, and the multiply-adds
XLA fuses: the samplers that transform exact uniform bits with them), FLOAT_MATH below names
the op, and those cases compare their float results to FLOAT_TOL (integers and bits still
exactly)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.frontend.trace import trace
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.legalize import legalize
from rlx_jax.backends.base import all_backends, get_backend, kept_kinds

from .conftest import BACKENDS
from .where_ran import COREML_KEY_BITS

pytestmark = COREML_KEY_BITS

R = jax.random
SAMPLERS = {
    "uniform": lambda k, dt, sh: R.uniform(k, sh, dt),
    "uniform_range": lambda k, dt, sh: R.uniform(k, sh, dt, minval=-2.0, maxval=3.0),
    "normal": lambda k, dt, sh: R.normal(k, sh, dt),
    "bernoulli": lambda k, dt, sh: R.bernoulli(k, 0.3, sh),
    "randint": lambda k, dt, sh: R.randint(k, sh, -5, 17),
    "bits8": lambda k, dt, sh: R.bits(k, sh, jnp.uint8),
    "bits16": lambda k, dt, sh: R.bits(k, sh, jnp.uint16),
    "truncated_normal": lambda k, dt, sh: R.truncated_normal(k, -1.5, 2.0, sh, dt),
    "categorical": lambda k, dt, sh: R.categorical(k, jnp.linspace(-1, 1, 5).astype(dt),
                                                   shape=sh),
    "gumbel": lambda k, dt, sh: R.gumbel(k, sh, dt),
    "permutation": lambda k, dt, sh: R.permutation(k, 11),
    "permutation_axis": lambda k, dt, sh: R.permutation(
        k, jnp.arange(12.0, dtype=dt).reshape(4, 3), axis=1, independent=True),
    "choice_replace": lambda k, dt, sh: R.choice(k, 10, sh, replace=True),
    "choice_no_replace": lambda k, dt, sh: R.choice(k, 10, (3,), replace=False),
    "choice_p": lambda k, dt, sh: R.choice(k, 6, (4,), replace=False,
                                           p=jnp.array([.1, .2, .3, .1, .2, .1], dt)),
    "gamma": lambda k, dt, sh: R.gamma(k, 1.5, sh, dt),
    "beta": lambda k, dt, sh: R.beta(k, 2.0, 3.0, sh, dt),
    "dirichlet": lambda k, dt, sh: R.dirichlet(k, jnp.array([0.5, 1., 2.], dt), sh),
    "split_fold_in": lambda k, dt, sh: R.key_data(R.fold_in(R.split(R.fold_in(k, 3), 3)[1], 7)),
}

# Measured on 1024 float32 draws (key 42, shape (64, 16)): values differing / max |difference|.
_ERF_INV = ("erf_inv: MLX's mx.erfinv is its own approximation and Core ML's composition of "
            "XLA's polynomials rounds every multiply and add that XLA CPU fuses; exact uniform "
            "bits map to floats up to ~1e-6 apart (normal: mlx 306/1024, coreml 51/1024)")
_LOG = ("log: the backend's log is not XLA's; gumbel's -log(-log(u)) differs by up to 4.8e-7 "
        "(mlx 234/1024, coreml 366/1024 values)")
# XLA's CPU code generator contracts a multiply feeding an add in one fused computation into
# one fused multiply-add (LLVM fp-contract): uniform(minval, maxval) computes
# u * (maxval - minval) + minval with a single rounding under jax.jit; MLX and Core ML round
# the product and the sum separately, 1 ulp apart on ~1/4 of the values (checked: numpy's
# float64 fma rounded once to float32 reproduces jax.jit's bits, two float32 roundings MLX's).
_FMA = ("XLA CPU contracts u * scale + minval into one fused multiply-add (one rounding); the "
        "backend rounds twice, 1 ulp apart")
_GAMMA = ("log/exp/pow in the rejection test and in the sample; the bits agree, the float "
          "results differ by up to 2.9e-6 (mlx gamma 181/1024; coreml gamma 0/1024 but beta "
          "421/1024, dirichlet 1381/3072)")
# The float tolerance of the FLOAT_MATH cases, relative to max(1, |value|): 32 float32 epsilons
# (measured on 1024 draws: 1-4 eps on most; mlx gamma under vmap 23 eps, alpha 0.7's u**(1/a)).
FLOAT_TOL = 32 * float(np.finfo(np.float32).eps)
FLOAT_MATH = {
    "mlx": {"uniform_range": _FMA, "normal": _ERF_INV, "truncated_normal": _ERF_INV, "gumbel": _LOG,
            "gamma": _GAMMA, "gamma_vmap": _GAMMA, "beta": _GAMMA, "dirichlet": _GAMMA},
    "coreml": {"uniform_range": _FMA, "normal": _ERF_INV, "truncated_normal": _ERF_INV,
               "gumbel": _LOG, "gamma_vmap": _GAMMA, "beta": _GAMMA, "dirichlet": _GAMMA},
}


def _leaves(x):
    return [np.asarray(R.key_data(v)) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
            else np.asarray(v) for v in jax.tree.leaves(x)]


def assert_same(fn, backend, *args, float_tol=0.0):
    """rlx_jax.jit(fn) equals jax.jit(fn), bit for bit (float results to `float_tol` relative to
    max(1, |value|) where it is given); key results are typed keys as JAX's."""
    want = jax.jit(fn)(*args)
    got = rlx_jax.jit(fn, backend=backend)(*args)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    for g, w in zip(_leaves(got), _leaves(want)):
        if float_tol and np.issubdtype(w.dtype, np.floating):
            bound = float_tol * np.maximum(1.0, np.abs(w.astype(np.float64)))
            assert (np.abs(g.astype(np.float64) - w) <= bound).all(), \
                np.abs(g.astype(np.float64) - w).max()
        else:
            np.testing.assert_array_equal(g, w)


def _tol(backend, name):
    """FLOAT_TOL where FLOAT_MATH lists the case (its reason is the op that differs), else 0:
    bit for bit."""
    return FLOAT_TOL if name in FLOAT_MATH.get(backend, {}) else 0.0


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_bit_exact(backend, name):
    fn = functools.partial(SAMPLERS[name], dt=jnp.float32, sh=(7, 3))
    assert_same(lambda k: fn(k), backend, R.key(42), float_tol=_tol(backend, name))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", ["uniform", "bernoulli", "normal", "choice_p"])
def test_sampler_low_precision(backend, name, dtype):
    """float16/bfloat16 draws (16-bit random bits); normal's erf_inv is evaluated in float32
    and its ulp differences vanish in the rounding to 16 bits for these draws."""
    fn = functools.partial(SAMPLERS[name], dt=dtype, sh=(5, 3))
    assert_same(lambda k: fn(k), backend, R.key(7))


@pytest.mark.parametrize("shape", [(0,), (1,), (5,), (2, 3, 5), (4, 0, 2)], ids=str)
@pytest.mark.parametrize("name", ["uniform", "randint", "bits8", "bits16"])
def test_sampler_shapes(backend, name, shape):
    """Odd counts (threefry pads them), one element, 0-size draws."""
    fn = functools.partial(SAMPLERS[name], dt=jnp.float32, sh=shape)
    assert_same(lambda k: fn(k), backend, R.key(3))


@pytest.mark.parametrize("partitionable", [True, False], ids=["partitionable", "original"])
@pytest.mark.parametrize("name", ["uniform", "bits8", "bits16", "randint", "split_fold_in"])
def test_threefry_partitionable_on_and_off(backend, name, partitionable):
    fn = functools.partial(SAMPLERS[name], dt=jnp.float32, sh=(5, 3))
    with jax.threefry_partitionable(partitionable):
        assert_same(lambda k: fn(k), backend, R.key(11))


def _bits64(k):
    return R.bits(k, (5,), jnp.uint64)


@pytest.mark.parametrize("partitionable", [True, False], ids=["partitionable", "original"])
def test_64_bit_draws(backend, partitionable):
    with jax.enable_x64(True), jax.threefry_partitionable(partitionable):
        assert_same(_bits64, backend, R.key(5))


@pytest.mark.x64
def test_int64_seeds_and_float64_draws(backend):
    """Under jax_enable_x64: keys from int64 seeds (both words used), float64 uniform draws
    (64-bit random bits)."""
    def fn(seeds):
        keys = jax.vmap(R.key)(seeds)
        return R.key_data(keys), jax.vmap(lambda k: R.uniform(k, (3,), jnp.float64))(keys)
    with jax.enable_x64(True):
        assert_same(fn, backend, np.array([0, 1, -7, 2 ** 40 + 3], np.int64))


def test_raw_uint32_keys(backend):
    """jax.random.PRNGKey keys (uint32[2]): argument, split, results as raw data."""
    def fn(key, x):
        k1, k2 = R.split(key)
        return x * R.uniform(k1, x.shape), R.split(k2, 3)
    assert_same(fn, backend, R.PRNGKey(0), np.ones((4, 2), np.float32))


def test_typed_key_results_and_arrays_of_keys(backend):
    """A function returning new typed keys (shape (), (3,), (2, 2)) gives typed keys back."""
    def fn(key):
        k, sub = R.split(key)
        return k, R.split(sub, 3), R.split(sub, (2, 2)), R.uniform(sub, (2,))
    assert_same(fn, backend, R.key(1))


def test_key_returned_unchanged(backend):
    """The argument key given back as it is (on Core ML the host hands it back: no Core ML
    tensor holds uint32), next to a result computed from it."""
    assert_same(lambda k, x: (jnp.tanh(x) + R.uniform(k, x.shape), k), backend, R.key(2),
                np.ones(3, np.float32))


def test_cloned_keys_are_the_same_keys(backend):
    """jax.random.clone (JAX's random_clone, a key-reuse marker) gives the keys themselves."""
    assert_same(lambda k: (R.clone(k), R.uniform(R.clone(k)[1], (3,))), backend,
                R.split(R.key(3), 4))


def test_closed_over_key_is_a_constant(backend):
    key = R.key(99)
    assert_same(lambda x: x + R.normal(R.fold_in(key, 1), x.shape) * 0 + R.uniform(key, x.shape),
                backend, np.zeros(6, np.float32))


def test_keys_through_indexing_and_control_flow(backend):
    """keys[i], keys[i] dynamic, concatenation, select, scan and fori_loop carrying keys."""
    def fn(key, i, flag):
        keys = R.split(key, 4)
        a = R.uniform(keys[1], (3,))
        b = R.uniform(keys[i], (3,))
        both = jnp.concatenate([keys[:2], keys[3:]])
        pick = jax.lax.select(flag, both[0], both[2])

        def step(k, _):
            k, sub = R.split(k)
            return k, R.bits(sub, (2,))
        last, ys = jax.lax.scan(step, pick, None, length=3)
        k2 = jax.lax.fori_loop(0, i + 1, lambda j, k: R.fold_in(k, j), last)
        return a, b, ys, R.key_data(k2), jax.lax.cond(flag, lambda k: R.split(k)[0],
                                                       lambda k: k, k2)
    assert_same(fn, backend, R.key(4), np.int32(2), np.bool_(True))


@pytest.mark.parametrize("make", ["key", "PRNGKey"])
def test_keys_seeded_inside(backend, make):
    """random_seed of a traced int32 seed (the high word is seed >> 32, which is 0), negative
    seeds included, then key_data / wrap_key_data round trips."""
    def fn(seeds):
        keys = jax.vmap(getattr(R, make))(seeds)
        back = R.wrap_key_data(R.key_data(keys)) if make == "key" else keys
        return R.key_data(back) if make == "key" else back, jax.vmap(
            lambda k: R.uniform(k, (2,)))(keys)
    assert_same(fn, backend, np.array([0, 1, -7, 2 ** 31 - 1], np.int32))


def test_keys_updated_in_place(backend):
    """keys.at[i].set(k) (scatter) and dynamic_update_slice on key arrays."""
    def fn(key, i):
        keys = R.split(key, 4)
        keys = keys.at[2].set(R.fold_in(key, 5))
        keys = jax.lax.dynamic_update_slice(keys, R.split(keys[0], 1), (i,))
        return keys, jax.vmap(lambda k: R.bits(k, (2,)))(keys)
    assert_same(fn, backend, R.key(6), np.int32(1))


def test_vmap_over_keys(backend):
    def fn(keys, x):
        return jax.vmap(lambda k: R.uniform(k, x.shape) * x + R.bernoulli(k, 0.5, x.shape))(keys)
    assert_same(fn, backend, R.split(R.key(8), 5), np.ones(3, np.float32))


@pytest.mark.parametrize("name", ["uniform", "randint", "bits8", "normal", "categorical",
                                  "gumbel", "permutation", "choice_replace",
                                  "choice_no_replace", "split_fold_in"])
def test_sampler_under_vmap(backend, name):
    """jax.vmap over 3 keys: batched keys reach every Random* kind and the samplers' sorts."""
    fn = functools.partial(SAMPLERS[name], dt=jnp.float32, sh=(4, 3))
    assert_same(jax.vmap(lambda k: fn(k)), backend, R.split(R.key(13), 3),
                float_tol=_tol(backend, name))


def test_vmap_over_keys_of_a_while_loop(backend):
    """gamma under vmap: a While with a batched predicate (lanes stop independently)."""
    assert_same(jax.vmap(lambda k: R.gamma(k, 0.7, (4,))), backend, R.split(R.key(2), 3),
                float_tol=_tol(backend, "gamma_vmap"))


def test_train_step_with_dropout_mask_and_noise(backend):
    """The issue's train step: mask and noise bit-exact; the update (float matmuls, summed in
    the backend's own order) to a float tolerance."""
    def step(params, key, x):
        k1, k2 = R.split(key)
        mask = R.bernoulli(k1, 0.9, x.shape)
        noise = R.normal(k2, x.shape) if backend == "xla" else R.uniform(k2, x.shape)
        loss = lambda p: jnp.mean((jnp.where(mask, x / 0.9, 0.0) @ p + noise @ p) ** 2)
        return mask, noise, k1, params - 0.1 * jax.grad(loss)(params)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    args = (np.eye(4, dtype=np.float32), R.key(0), x)
    want, got = jax.jit(step)(*args), rlx_jax.jit(step, backend=backend)(*args)
    for g, w in zip(_leaves(got[:3]), _leaves(want[:3])):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(np.asarray(got[3]), np.asarray(want[3]), rtol=1e-5, atol=1e-6)


# ---- flax ----
flax_nn = pytest.importorskip("flax.linen")


class _Mlp(flax_nn.Module):
    @flax_nn.compact
    def __call__(self, x, train):
        x = flax_nn.Dense(8)(x)
        x = flax_nn.Dropout(0.3, deterministic=not train)(x)
        return flax_nn.Dense(2)(x)


def test_flax_dropout_mask_bit_exact(backend):
    drop = flax_nn.Dropout(0.3)
    ones = np.ones((6, 5), np.float32)
    assert_same(lambda k: drop.apply({}, ones, deterministic=False, rngs={"dropout": k}),
                backend, R.key(5))


def test_flax_dropout_training_step(backend):
    """The masks are exact (above); the update is float matmuls, whose summation order is the
    backend's own, so it is compared to a float tolerance."""
    model = _Mlp()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    params = model.init(R.key(0), x, False)

    def step(params, key, x):
        def loss(p):
            return jnp.sum(model.apply(p, x, True, rngs={"dropout": key}) ** 2)
        g = jax.grad(loss)(params)
        return jax.tree.map(lambda p, d: p - 0.01 * d, params, g)
    want = jax.jit(step)(params, R.key(5), x)
    got = rlx_jax.jit(step, backend=backend)(params, R.key(5), x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


INITIALIZERS = {   # initializer -> the sampler it draws with
    "lecun_normal": "truncated_normal", "glorot_uniform": "uniform", "uniform": "uniform",
    "normal": "normal", "truncated_normal": "truncated_normal", "variance_scaling": "uniform",
}


@pytest.mark.parametrize("init", sorted(INITIALIZERS))
def test_flax_initializers_inside_jitted_init(backend, init):
    ini = flax_nn.initializers
    make = {"lecun_normal": ini.lecun_normal(), "glorot_uniform": ini.glorot_uniform(),
            "uniform": ini.uniform(0.5), "normal": ini.normal(0.02),
            "truncated_normal": ini.truncated_normal(0.02),
            "variance_scaling": ini.variance_scaling(1.0, "fan_avg", "uniform")}[init]
    assert_same(lambda k: make(k, (6, 5), jnp.float32), backend, R.key(3),
                float_tol=_tol(backend, INITIALIZERS[init]))


def test_flax_model_init_inside_jit(backend):
    model = _Mlp()
    x = np.ones((2, 4), np.float32)                # Dense's default kernel init: lecun_normal
    assert_same(lambda k: model.init(k, x, False), backend, R.key(0),
                float_tol=_tol(backend, "truncated_normal"))


# ---- structure, placement, errors ----
def test_keys_are_typed_in_the_ir_and_physical_after_legalization():
    g = trace(lambda k: R.split(k, 3)[1:], R.key(0))
    text = g.as_text()
    assert "key<fry>[3] = RandomSplit" in text and "RandomWrap" in text
    assert g.inputs[0].type_str() == "u32[2]"                  # keys cross as their data
    mlx = legalize(g, kept_kinds(all_backends()["mlx"]), backend="mlx")
    assert "key<fry>" not in mlx.as_text() and "ThreeFry2x32" not in mlx.op_counts()
    assert [v.type_str() for v in mlx.outputs] == ["u32[2,2]"]



def test_threefry_decomposition_is_constant_size():
    """The uint32 IR of ThreeFry2x32 has the same nodes for 2**4 and 2**20 bits."""
    counts = []
    mlx_like = frozenset(kept_kinds(get_backend("xla"))) - {K.ThreeFry2x32, K.RandomBits,
                                                           K.RandomWrap, K.RandomUnwrap,
                                                           K.RandomSplit, K.RandomFoldIn,
                                                           K.RandomSeed, K.RandomGamma}
    for n in (2 ** 4, 2 ** 20):
        g = trace(lambda k, _n=n: R.bits(k, (_n,)), R.key(0))
        counts.append(legalize(g, mlx_like, backend="test").op_counts())
    assert counts[0] == counts[1]
    assert counts[0]["Binary"] >= 100 and "ThreeFry2x32" not in counts[0]


def test_coreml_runs_the_bits_on_the_host_and_the_rest_on_the_device():
    if "coreml" not in BACKENDS:
        pytest.skip("coreml is not available here")

    def fn(key, x):
        h = jnp.tanh(x @ x.T)
        return h * R.uniform(key, h.shape)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    placed = rlx_jax.jit(fn, backend="coreml").lower(R.key(0), x).placement()
    host = [n.kind for s in placed.segments if s.placement == "host" for n in s.nodes]
    device = [n.kind for s in placed.segments if s.placement == "device" for n in s.nodes]
    assert K.Binary in host and K.Bitcast in host
    assert K.DotGeneral in device and K.Activation in device
    assert K.DotGeneral not in host and K.Activation not in host
    want = jax.jit(fn)(R.key(0), x)                # tanh is Core ML's own: a float tolerance
    np.testing.assert_allclose(np.asarray(rlx_jax.jit(fn, backend="coreml")(R.key(0), x)),
                               np.asarray(want), rtol=1e-5, atol=1e-6)
    assert_same(lambda k: R.uniform(k, (3, 3)), "coreml", R.key(0))


def test_flag_change_retraces():
    f = rlx_jax.jit(lambda k: R.uniform(k, (4,)), backend="xla")
    a = np.asarray(f(R.key(0)))
    with jax.threefry_partitionable(False):
        b = np.asarray(f(R.key(0)))
        np.testing.assert_array_equal(b, np.asarray(jax.jit(lambda k: R.uniform(k, (4,)))(
            R.key(0))))
    assert f.trace_count == 2 and not np.array_equal(a, b)
