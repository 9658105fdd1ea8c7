"""The identity of every reduction (ir.ops.REDUCE_FNS, POOL_FNS) in a dtype, defined once.

It is the value of a reduction over nothing and the padding of a windowed reduction: the
reference semantics (ir/reference.py), MLX's empty reductions and pools, and Core ML's folded
empty reductions and padded pools all read it from here.
"""
import jax.numpy as jnp
import numpy as np


def lowest(dtype):
    """The identity of max: -inf, the least integer, or False (a 0-d numpy array)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array(False)
    if jnp.issubdtype(dt, jnp.inexact):
        return np.array(-np.inf, dt)
    return np.array(np.iinfo(dt).min, dt)


def highest(dtype):
    """The identity of min: +inf, the greatest integer, or True (a 0-d numpy array)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array(True)
    if jnp.issubdtype(dt, jnp.inexact):
        return np.array(np.inf, dt)
    return np.array(np.iinfo(dt).max, dt)


IDENTITIES = {  # reduction fn -> fn(numpy dtype): its identity, a 0-d array of that dtype
    "sum": lambda dt: np.zeros((), dt),
    "or": lambda dt: np.zeros((), dt),
    "xor": lambda dt: np.zeros((), dt),
    "prod": lambda dt: np.ones((), dt),
    "and": lambda dt: np.invert(np.zeros((), dt)),   # every bit set: True, -1, unsigned max
    "max": lowest,
    "min": highest,
}


def identity(fn, dtype):
    """The identity of reduction `fn` in numpy `dtype`, a 0-d numpy array."""
    return IDENTITIES[fn](np.dtype(dtype))
