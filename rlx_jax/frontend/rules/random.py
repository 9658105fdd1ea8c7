"""Randomness: JAX's PRNG key primitives -> the Random* kinds on typed keys (ir/prng.py).

`random_bits` and `random_split` take `jax_threefry_partitionable` as it is when the function is
traced (an attribute, `partitionable`), as jax.jit does when it lowers them. `random_gamma`
(gamma, beta, dirichlet) is one RandomGamma node: JAX's own lowering of it on xla, its
implementation (per-sample rejection loops as While nodes) elsewhere
(passes/decompose/keys.py). `iota_2x32_shape` (the counters of partitionable threefry) is a
uint32 Iota; `threefry2x32` is the ThreeFry2x32 hash. Keys of every PRNG implementation are
typed by it (ir/prng.py): rbg's, unsafe_rbg's and custom ones run their own functions on their
data. `rng_bit_generator` (rbg's bits) is XLA's Philox, ir/philox.py,
translated in place; its other algorithm (RNG_THREE_FRY) is refused.
"""
import functools

import jax
import numpy as np
from jax import lax

from ...ir import philox, prng
from ...ir.ops import OpKind as K
from . import jaxpr_rule


def _partitionable():
    return bool(jax.config.jax_threefry_partitionable)


@jaxpr_rule("random_seed")
def _random_seed(ctx, seeds, *, impl):
    return ctx.emit(K.RandomSeed, (seeds,), key_dtype=prng.key_dtype(impl))


@jaxpr_rule("random_wrap")
def _random_wrap(ctx, data, *, impl):
    prng.mark_key_data(data)
    return ctx.emit(K.RandomWrap, (data,), key_dtype=prng.key_dtype(impl))


jaxpr_rule("random_unwrap")(lambda ctx, keys: ctx.emit(K.RandomUnwrap, (keys,)))
# jax.random.clone: the same keys as a new value (a marker for JAX's key-reuse checker, which
# rlx_jax programs do not run); values are immutable here, so the keys themselves
jaxpr_rule("random_clone")(lambda ctx, keys: keys)
jaxpr_rule("random_fold_in")(lambda ctx, keys, msgs: ctx.emit(K.RandomFoldIn, (keys, msgs)))
jaxpr_rule("random_bits")(lambda ctx, keys, *, bit_width, shape: ctx.emit(
    K.RandomBits, (keys,), bit_width=int(bit_width), shape=tuple(int(d) for d in shape),
    partitionable=_partitionable()))
jaxpr_rule("random_split")(lambda ctx, keys, *, shape: ctx.emit(
    K.RandomSplit, (keys,), shape=tuple(int(d) for d in shape), partitionable=_partitionable()))
jaxpr_rule("threefry2x32")(lambda ctx, k1, k2, x1, x2: ctx.emit(K.ThreeFry2x32, (k1, k2, x1, x2)))


@jaxpr_rule("iota_2x32_shape")
def _iota_2x32_shape(ctx, *, shape):
    """(hi, lo) words of the row-major uint64 iota of `shape`: hi is 0 below 2**32 elements;
    above, the words are summed from each axis's iota times its stride in uint32 pairs."""
    b = ctx.b
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n > 2 ** 32:
        if max(shape) > 2 ** 32:
            return ctx.unsupported(
                f"random bits of shape {shape}: an axis longer than 2**32 is not supported; "
                f"draw in pieces (jax.random.split the key)")
        closed = jax.make_jaxpr(functools.partial(philox.iota_2x32, shape))()
        return ctx.translate(closed, [])
    lo = b.reshape(b.add(K.Iota, (), {"dtype": np.dtype(np.uint32), "shape": (n,),
                                      "dimension": 0}), shape)
    hi = b.expand(b.const(np.uint32(0)), shape, ())
    return hi, lo


jaxpr_rule("random_gamma")(lambda ctx, keys, a, *, log_space: ctx.emit(
    K.RandomGamma, (keys, a), log_space=bool(log_space)))


_PHILOX = (lax.RandomAlgorithm.RNG_DEFAULT, lax.RandomAlgorithm.RNG_PHILOX)


@jaxpr_rule("rng_bit_generator")
def _rng_bit_generator(ctx, key, *, shape, dtype, algorithm, out_sharding=None):
    """XLA's Philox (ir/philox.py), which RNG_DEFAULT is on CPU and GPU, translated in place."""
    if algorithm not in _PHILOX:
        return ctx.unsupported(
            f"rng_bit_generator with {algorithm.name} is not supported: rlx_jax computes "
            f"RNG_DEFAULT and RNG_PHILOX (XLA's Philox4x32-10); pass one of those")
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n > philox.FLAT_LIMIT and (np.dtype(dtype) == np.uint64 or max(shape) > 2 ** 32):
        return ctx.unsupported(
            f"rng_bit_generator of {n} {np.dtype(dtype).name} elements of shape {shape} in one "
            f"draw is not supported (above {philox.FLAT_LIMIT} elements, only narrower dtypes "
            f"and axes below 2**32); draw in pieces (jax.random.split the key)")
    fn = functools.partial(philox.rng_bit_generator, shape=shape, dtype=np.dtype(dtype))
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(key.shape, key.dtype))
    return ctx.translate(closed, [key])
