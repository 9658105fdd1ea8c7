"""PRNG keys in the IR, and JAX's key functions on their physical data.

A typed JAX key (`jax.random.key`, dtype `key<fry>`) is an IR Value whose dtype is the key
dtype of its implementation: a numpy structured dtype with one uint32 field of the
implementation's key shape, named by its tag (`key_dtype`: threefry2x32's `KEY` holds
uint32[2], printed `key<fry>`; rbg's holds uint32[4], `key<rbg>`), with the key array's
logical shape (a `key<fry>[3]` holds 3 keys). Every PRNGImpl works, JAX's own (threefry2x32,
rbg, unsafe_rbg) and custom ones: the functions below run the implementation's own seed /
split / random_bits / fold_in. Values of a key dtype are never silently plain integers:
backends that cannot hold them get them rewritten to their physical data,
`uint32[..., *key_shape]`, by passes/decompose/keys.py.

`bits`, `split`, `fold_in`, `seed` and `gamma` are JAX's own key functions
(jax._src.random.prng's `*_impl_base`) on physical key data, with `jax_threefry_partitionable`
given explicitly instead of read from the config when lowered: the reference semantics of the
Random* kinds (ir/reference.py) and their decompositions (passes/decompose/keys.py) both call
them, so the two cannot disagree. rbg's bits come from `lax.rng_bit_generator`
(frontend/rules/random.py decomposes it with ir/philox.py).

    >>> KEY.itemsize, dtype_of(jax.random.key(0).dtype) == KEY
    (8, True)
    >>> dtype_name(dtype_of(jax.random.key(0, impl="rbg").dtype)), key_shape(KEY)
    ('key<rbg>', (2,))
"""
from typing import Any

import jax
import numpy as np

from ..jax_internals import module
from .ops import OpKind

_random_core, _prng, _fry = module("random_core"), module("prng"), module("threefry")
_config = module("config")

IMPL = "threefry2x32"
threefry2x32_p = _fry.threefry2x32_p
random_gamma_p = _random_core.random_gamma_p
_IMPLS: dict[Any, Any] = {}     # key dtype -> PRNGImpl


def key_dtype(impl):
    """The IR dtype of keys of PRNGImpl `impl` (registered on first use)."""
    dt = np.dtype([(impl.tag, "<u4", tuple(int(d) for d in impl.key_shape))])
    known = _IMPLS.setdefault(dt, impl)
    if known is not impl and known.name != impl.name:
        raise ValueError(f"two PRNG implementations, '{known.name}' and '{impl.name}', share the "
                         f"tag '{impl.tag}' and key shape {dt[0].shape}; rlx_jax tells key "
                         f"types apart by both: give one of them another tag")
    return dt


JAX_KEY = jax.eval_shape(lambda: jax.random.key(0, impl=IMPL)).dtype
KEY = key_dtype(JAX_KEY._impl)


def is_key(dtype):
    """Whether `dtype` (numpy or JAX) is a PRNG key dtype, of any implementation."""
    if isinstance(dtype, np.dtype):
        return dtype in _IMPLS
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def dtype_of(dtype):
    """The IR (numpy) dtype of a JAX dtype: key_dtype(impl) for keys; np.dtype otherwise."""
    if isinstance(dtype, np.dtype):
        return dtype
    if is_key(dtype):
        return key_dtype(dtype._impl)
    return np.dtype(dtype)


def jax_dtype(dtype):
    """The JAX dtype of an IR dtype (a key dtype -> key<tag>), for abstract evaluation."""
    return _prng.KeyTy(_IMPLS[dtype]) if dtype in _IMPLS else dtype


def dtype_name(dtype):
    """How the IR prints a key dtype: key<tag>."""
    return f"key<{dtype.names[0]}>"


def key_shape(dtype):
    """The shape of one key's data for an IR key dtype: (2,) for threefry, (4,) for rbg."""
    return dtype[0].shape


KEY_DATA_BOUNDS = (0, 2 ** 32 - 1)


def mark_key_data(v):
    """A graph Input holding key data (uint32, raw or a typed key's) may hold any uint32: its
    `bounds` attribute says so, so no backend narrows it (Core ML's int32 inputs assume
    int32-range values otherwise, intervals.input_bounds)."""
    if v.node is not None and v.node.kind is OpKind.Input:
        v.node.attrs["bounds"] = KEY_DATA_BOUNDS


def physical_shape(shape, dtype=KEY):
    """The shape of the physical data of a key array of `shape` and IR key dtype `dtype`."""
    return tuple(shape) + key_shape(dtype)


def _partitionable(on):
    return _config.threefry_partitionable(bool(on))


# ---- JAX's key functions on physical data (uint32[*batch, *key_shape]) ----
def bits(data, *, dtype=KEY, bit_width, shape, partitionable):
    """uint{bit_width}[*batch, *shape]: random_bits of the keys whose data is `data`."""
    with _partitionable(partitionable):
        return _prng.random_bits_impl_base(
            _IMPLS[dtype], data, data.ndim - len(key_shape(dtype)), bit_width=bit_width,
            shape=tuple(shape))


def split(data, *, dtype=KEY, shape, partitionable):
    """uint32[*batch, *shape, *key_shape]: the data of random_split of the keys in `data`."""
    with _partitionable(partitionable):
        return _prng.random_split_impl_base(
            _IMPLS[dtype], data, data.ndim - len(key_shape(dtype)), shape=tuple(shape))


def fold_in(data, msgs, *, dtype=KEY):
    """uint32[*batch, *key_shape]: the data of random_fold_in(keys, msgs), broadcast as JAX
    does."""
    batch = data.shape[:data.ndim - len(key_shape(dtype))]
    return _prng.random_fold_in_impl_base(_IMPLS[dtype], data, jax.numpy.asarray(
        msgs, dtype="uint32"), batch)


def seed(seeds, *, dtype=KEY):
    """uint32[*seeds.shape, *key_shape]: the data of random_seed of integer `seeds`."""
    return _prng.random_seed_impl_base(seeds, impl=_IMPLS[dtype])


def gamma(data, a, *, dtype=KEY, log_space):
    """random_gamma of the keys whose data is `data`, as JAX lowers it (vmapped rejection
    sampling: While loops on typed keys, which passes/decompose/keys.py physicalizes in turn)."""
    return _random_core._gamma_impl(wrap(data, dtype), a, log_space=log_space, use_vmap=True)


def wrap(data, dtype=KEY):
    """The typed keys (of IR key dtype `dtype`) whose data is `data`."""
    return _prng.random_wrap(jax.numpy.asarray(data, np.uint32), impl=_IMPLS[dtype])


def unwrap(keys):
    """The physical data of typed keys."""
    return jax.random.key_data(keys)
