"""PRNG keys of every implementation inside rlx_jax.jit: JAX's 'rbg' and 'unsafe_rbg' and a
custom PRNGImpl; and lax.rng_bit_generator, rbg's bits (XLA's Philox, rlx_jax/ir/philox.py).

Oracles: lax.rng_bit_generator under plain JAX, bit for bit; jax.jit of the same function on
the CPU, bit for bit (float results to test_random's FLOAT_TOL where its FLOAT_MATH names the
sampler's float op)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax import errors
from rlx_jax.ir import philox
from rlx_jax.jax_internals import module

from .test_random import SAMPLERS, _tol, assert_same
from .where_ran import COREML_KEY_BITS, expect_eager

pytestmark = COREML_KEY_BITS
R = jax.random
_fry, _prng = module("threefry"), module("prng")


# A custom implementation (our own, for the test): two threefry keys per key, bits the xor of
# both streams, split and fold_in on both halves.
def _pair_seed(seed):
    other = seed ^ jnp.asarray(5, seed.dtype)
    return jnp.stack([_fry.threefry_seed(seed), _fry.threefry_seed(other)])


def _pair_bits(key, bit_width, shape):
    return (_fry.threefry_random_bits(key[0], bit_width, shape)
            ^ _fry.threefry_random_bits(key[1], bit_width, shape))


PAIR = _prng.PRNGImpl(
    key_shape=(2, 2), seed=_pair_seed,
    split=lambda key, shape: jax.vmap(_fry.threefry_split, (0, None), len(shape))(key, shape),
    random_bits=_pair_bits,
    fold_in=lambda key, data: jnp.stack([_fry.threefry_fold_in(key[0], data),
                                         _fry.threefry_fold_in(key[1], data)]),
    name="rlx_test_pair", tag="rlx_pair")
IMPLS = {"rbg": "rbg", "unsafe_rbg": "unsafe_rbg", "custom": PAIR}


def _key(impl, seed):
    return _prng.random_seed(np.int32(seed), impl=PAIR) if impl == "custom" \
        else R.key(seed, impl=IMPLS[impl])


# ---- rng_bit_generator: XLA's Philox, bit for bit ---------------------------------------------
KEYS = [[1, 2, 3, 4], [0, 0, 0xFFFFFFFF, 0xFFFFFFFF],      # the counter's carry into the key half
        [7, 0xFFFFFFFF, 0xFFFFFFF0, 0xFFFFFFFF], [0x9E3779B9, 12345, 0xFFFFFFFE, 0]]


@pytest.mark.parametrize("shape", [(), (0,), (1,), (5,), (3, 7), (2, 3, 4), (33,)], ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_philox_is_rng_bit_generator(dtype, shape):
    for words in KEYS:
        key = jnp.asarray(words, jnp.uint32)
        want = lax.rng_bit_generator(key, shape, dtype=dtype)
        got = jax.jit(functools.partial(philox.rng_bit_generator, shape=shape, dtype=dtype))(key)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.x64
@pytest.mark.parametrize("shape", [(), (5,), (3, 7)], ids=str)
def test_philox_64_bit_draws_and_uint64_keys(shape):
    """Under jax_enable_x64: uint64 draws (two words per output), and uint64[2] keys."""
    with jax.enable_x64(True):
        for words in KEYS:
            key32 = jnp.asarray(words, jnp.uint32)
            for key in (key32, lax.bitcast_convert_type(key32.reshape(2, 2), jnp.uint64)):
                for dtype in ("uint64", "uint32", "uint8"):
                    want = lax.rng_bit_generator(key, shape, dtype=dtype)
                    got = jax.jit(functools.partial(
                        philox.rng_bit_generator, shape=shape, dtype=dtype))(key)
                    for g, w in zip(got, want):
                        assert g.dtype == w.dtype and g.shape == w.shape
                        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("algorithm", ["RNG_DEFAULT", "RNG_PHILOX"])
@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_rng_bit_generator_on_every_backend(backend, dtype, algorithm):
    alg = getattr(lax.RandomAlgorithm, algorithm)
    fn = lambda k: lax.rng_bit_generator(k, (7, 3), dtype=dtype, algorithm=alg)  # noqa: E731
    assert_same(fn, backend, jnp.asarray(KEYS[1], jnp.uint32))


def test_rng_bit_generator_three_fry_is_refused_by_name(backend):
    fn = lambda k: lax.rng_bit_generator(  # noqa: E731
        k, (4,), dtype="uint32", algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
    with pytest.raises(errors.UnsupportedPrimitiveError, match="RNG_THREE_FRY.*RNG_PHILOX"):
        rlx_jax.jit(fn, backend=backend)(jnp.asarray(KEYS[0], jnp.uint32))


def _counter_bits(words, i):
    """Python-int oracle: output i of XLA's Philox for key `words` (block i // 4, counter
    s1 + block with its carry into s0 as one 128-bit number, word i % 4)."""
    s0, s1 = words[0] | (words[1] << 32), words[2] | (words[3] << 32)
    c = ((s0 << 64) | s1) + i // 4
    x = tuple(jnp.asarray([(c >> (32 * k)) & 0xFFFFFFFF], jnp.uint32) for k in range(4))
    key = (jnp.asarray([words[0]], jnp.uint32), jnp.asarray([words[1]], jnp.uint32))
    return int(philox.philox4x32(x, key)[i % 4][0])


def test_philox_by_element_at_indices_beyond_the_flat_limit():
    """Draws of more than FLAT_LIMIT words compute each element from its own block; at flat
    indices up to 2**62 (carries of the block index into both counter words) every element is
    the Python-int counter's output."""
    idx = [0, 5, 2 ** 32 - 1, 2 ** 32, 2 ** 34 + 7, 2 ** 35 + 2, 308000000 * 128 - 1, 2 ** 62 + 3]
    hi = jnp.asarray([i >> 32 for i in idx], jnp.uint32)
    lo = jnp.asarray([i & 0xFFFFFFFF for i in idx], jnp.uint32)
    for words in KEYS:
        got = philox.by_element(jnp.asarray(words, jnp.uint32), hi, lo)
        assert np.asarray(got).tolist() == [_counter_bits(words, i) for i in idx]


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_philox_by_element_is_rng_bit_generator(dtype):
    for words in KEYS:
        key = jnp.asarray(words, jnp.uint32)
        want = lax.rng_bit_generator(key, (5, 7), dtype=dtype)
        got = philox.rng_bit_generator(key, shape=(5, 7), dtype=dtype, elementwise=True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_iota_2x32_beyond_2_to_the_32():
    """The (hi, lo) iota of a shape of more than 2**32 elements is JAX's iota_2x32_shape (the
    tails compared under jax.jit, which computes only them)."""
    iota = module("prng").iota_2x32_shape
    for shape in [(3, 2 ** 31 + 5, 2), (2 ** 20, 2 ** 13 + 3), (5, 7)]:
        tail = lambda t: tuple(x[-2:, -3:] if x.ndim == 2 else x[:, -3:] for x in t)  # noqa
        got = jax.jit(lambda: tail(philox.iota_2x32(shape)))()
        want = jax.jit(lambda: tail(iota(shape)))()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_draws_beyond_2_to_the_32_lower(backend):
    """JAX's test_large_prng: more than 2**32 elements in one draw (threefry, which needs the
    64-bit iota, and rbg) trace, legalize and lower (tracing only: nothing of that size is
    built); a single axis longer than 2**32 is refused by name."""
    for impl in ("threefry2x32", "rbg"):
        fn = lambda: R.uniform(R.key(3, impl=impl), (308000000, 128), jnp.bfloat16)  # noqa
        rlx_jax.jit(fn, backend=backend).lower()
    fn = lambda k: lax.rng_bit_generator(k, (2 ** 33, 1), dtype="uint32")  # noqa: E731
    with pytest.raises(errors.UnsupportedPrimitiveError, match="in one draw is not supported"):
        rlx_jax.jit(fn, backend=backend).lower(jnp.asarray(KEYS[0], jnp.uint32))


# ---- keys of every implementation -------------------------------------------------------------
_MORE = {
    "vmap_uniform": lambda k, dt, sh: jax.vmap(lambda q: R.uniform(q, (3,), dt))(R.split(k, 4)),
    "loop_split": lambda k, dt, sh: lax.fori_loop(0, 3, lambda i, q: R.split(q)[1], k),
    "split_keys": lambda k, dt, sh: R.split(k, (2, 3)),
}
NAMES = ["uniform", "normal", "randint", "bits8", "bits16", "bernoulli", "split_fold_in",
         "vmap_uniform", "loop_split", "split_keys"]


# mx.compile (mlx 0.32, CPU) raises IndexError('_Map_base::at') on these programs, MLX's
# own compiler failing on a valid graph: the executable says so once and runs them uncompiled
MX_COMPILE_FAILS = {("mlx", "rbg", "randint"), ("mlx", "unsafe_rbg", "randint")}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_samplers_with_keys_of_another_implementation(backend, impl, name):
    if (backend, impl, name) in MX_COMPILE_FAILS:
        expect_eager("mx.compile raises IndexError('_Map_base::at') inside MLX on this program")
    fn = functools.partial({**SAMPLERS, **_MORE}[name], dt=jnp.float32, sh=(5, 3))
    assert_same(lambda k: fn(k), backend, _key(impl, 42), float_tol=_tol(backend, name))


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_keys_seeded_and_wrapped_inside_the_program(backend, impl):
    """random_seed and random_wrap of another implementation inside the program; the key data
    and a draw come out as jax.jit's."""
    make = (lambda s: _prng.random_seed(s, impl=PAIR)) if impl == "custom" else \
        (lambda s: R.key(s, impl=IMPLS[impl]))

    def fn(s, data):
        k = make(s)
        w = R.wrap_key_data(data, impl=IMPLS[impl]) if impl != "custom" else \
            _prng.random_wrap(data, impl=PAIR)
        return R.key_data(k), R.uniform(R.fold_in(w, 3), (4,))
    data = np.asarray(R.key_data(_key(impl, 9)))
    assert_same(fn, backend, np.int32(11), data)
