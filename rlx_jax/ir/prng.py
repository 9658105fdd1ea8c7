"""PRNG keys in the IR, and JAX's threefry key functions on their physical data.

A typed JAX key (`jax.random.key`, dtype `key<fry>`) is an IR Value of dtype KEY: a numpy
structured dtype holding the key's two uint32 words, printed `key<fry>`, with the key array's
logical shape (a `key<fry>[3]` holds 3 keys). Values of this dtype are never silently plain
integers: backends that cannot hold them get them rewritten to their physical data,
`uint32[..., 2]`, by passes/keys.py. Only the default `threefry2x32` implementation exists here.

`bits`, `split`, `fold_in`, `seed` and `gamma` are JAX's own threefry functions (jax._src.random) on
physical key data, with `jax_threefry_partitionable` given explicitly instead of read from the
config when lowered: the reference semantics of the Random* kinds (ir/reference.py) and their
decompositions (passes/keys.py) both call them, so the two cannot disagree.

    >>> KEY.itemsize, dtype_of(jax.random.key(0).dtype) == KEY
    (8, True)
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from ..jax_internals import module

from .ops import OpKind

_random_core, _prng, _fry = module("random_core"), module("prng"), module("threefry")

KEY = np.dtype([("fry", "<u4", (2,))])
KEY_NAME = "key<fry>"
IMPL = "threefry2x32"
threefry2x32_p = _fry.threefry2x32_p
random_gamma_p = _random_core.random_gamma_p
JAX_KEY = jax.eval_shape(lambda: jax.random.key(0, impl=IMPL)).dtype


def is_key(dtype):
    """Whether `dtype` (numpy or JAX) is a PRNG key dtype, of any implementation."""
    if isinstance(dtype, np.dtype):
        return dtype == KEY
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def dtype_of(dtype):
    """The IR (numpy) dtype of a JAX dtype: KEY for threefry keys; ValueError for another
    key implementation; np.dtype(dtype) otherwise."""
    if isinstance(dtype, np.dtype):
        return dtype
    if is_key(dtype):
        if dtype != JAX_KEY:
            raise ValueError(unsupported_impl(impl_name(dtype)))
        return KEY
    return np.dtype(dtype)


def jax_dtype(dtype):
    """The JAX dtype of an IR dtype (KEY -> key<fry>), for abstract evaluation."""
    return JAX_KEY if dtype == KEY else dtype


def impl_name(dtype):
    """The implementation name of a JAX key dtype (key<rbg> -> 'rbg')."""
    return getattr(getattr(dtype, "_impl", None), "name", str(dtype))


def unsupported_impl(name):
    """The message for keys of implementation `name` (not threefry2x32)."""
    return (f"PRNG keys of the '{name}' implementation are not supported: rlx_jax draws "
            f"bits with threefry2x32 only; make keys with the default implementation "
            f"(jax.random.key(seed) or jax.random.PRNGKey(seed) without impl='{name}', and "
            f"leave jax_default_prng_impl unset)")


KEY_DATA_BOUNDS = (0, 2 ** 32 - 1)


def mark_key_data(v):
    """A graph Input holding key data (uint32, raw or a typed key's) may hold any uint32: its
    `bounds` attribute says so, so no backend narrows it (Core ML's int32 inputs assume
    int32-range values otherwise, intervals.input_bounds)."""
    if v.node is not None and v.node.kind is OpKind.Input:
        v.node.attrs["bounds"] = KEY_DATA_BOUNDS


def physical_shape(shape):
    """The shape of the physical data of a key array of `shape`."""
    return tuple(shape) + (2,)


# ---- JAX's threefry key functions on physical data (uint32[..., 2]) ----
def _one_bits(key, bit_width, shape, partitionable):
    if partitionable:
        return _fry._threefry_random_bits_partitionable(key, bit_width, tuple(shape))
    return _fry._threefry_random_bits_original(key, bit_width, tuple(shape))


def _one_split(key, shape, partitionable):
    if partitionable:
        return _fry._threefry_split_foldlike(key, tuple(shape))
    return _fry._threefry_split_original(key, tuple(shape))


def bits(data, *, bit_width, shape, partitionable):
    """uint{bit_width}[*batch, *shape]: random_bits of the keys whose data is `data`."""
    fn = functools.partial(_one_bits, bit_width=bit_width, shape=shape,
                           partitionable=partitionable)
    return _prng.iterated_vmap_unary(data.ndim - 1, fn)(data)


def split(data, *, shape, partitionable):
    """uint32[*batch, *shape, 2]: the data of random_split of the keys whose data is `data`."""
    fn = functools.partial(_one_split, shape=shape, partitionable=partitionable)
    return _prng.iterated_vmap_unary(data.ndim - 1, fn)(data)


def fold_in(data, msgs):
    """uint32[*batch, 2]: the data of random_fold_in(keys, msgs), broadcast as JAX does."""
    fn = lambda k, m: _fry._threefry_fold_in(k, jnp.asarray(m, dtype="uint32"))  # noqa: E731
    return _prng.iterated_vmap_binary_bcast(data.shape[:-1], np.shape(msgs), fn)(data, msgs)


def seed(seeds):
    """uint32[*seeds.shape, 2]: the data of random_seed of integer `seeds`."""
    return _prng.iterated_vmap_unary(np.ndim(seeds), _fry.threefry_seed)(seeds)


def gamma(data, a, *, log_space):
    """random_gamma of the keys whose data is `data`, as JAX lowers it (vmapped rejection
    sampling: While loops on typed keys, which passes/keys.py physicalizes in turn)."""
    return _random_core._gamma_impl(wrap(data), a, log_space=log_space, use_vmap=True)


def wrap(data):
    """The typed keys whose data is `data`."""
    return jax.random.wrap_key_data(data, impl=IMPL)


def unwrap(keys):
    """The physical data of typed keys."""
    return jax.random.key_data(keys)
