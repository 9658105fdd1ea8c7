"""The op table: one record per case, crossed with every available backend by test_ops.py.

A case is a JAX function plus an argument maker; the oracle is JAX itself on CPU. Known
divergences of a backend are data with a reason, never `if` chains: they live in
tests/divergences_<backend>.py as DIVERGENCES = {case name: Expect(...)}.
"""
import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    args: Callable                      # rng -> tuple of numpy arrays
    grad: bool = False                  # also check jax.grad of sum(fn(...)) w.r.t. arg 0
    atol: float = 1e-5
    rtol: float = 1e-5
    static_argnums: tuple = ()


@dataclasses.dataclass(frozen=True)
class Expect:
    """A known divergence of one backend on one case."""
    reason: str
    error: str = None                   # name of the rlx_jax.errors class the backend must raise
    atol: float = None                  # looser tolerances on that backend
    rtol: float = None


def f32(*shape, lo=-2.0, hi=2.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def arr(dtype, *shape, lo=-3, hi=3):
    """Random array of `dtype` and `shape`."""
    dtype = jnp.dtype(dtype)

    def make(r):
        if dtype == jnp.bool_:
            return r.rand(*shape) > 0.5
        if jnp.issubdtype(dtype, jnp.integer):
            lo2 = max(lo, int(jnp.iinfo(dtype).min))
            return r.randint(lo2, hi + 1, shape).astype(dtype)
        return r.uniform(lo, hi, shape).astype(dtype)
    return make


def args(*makers):
    return lambda r: tuple(m(r) for m in makers)


CASES = [
    Case("add_f32", jnp.add, args(f32(3, 4), f32(3, 4)), grad=True),
    Case("matmul", jnp.matmul, args(f32(5, 3), f32(3, 4)), grad=True),
    Case("reduce_sum", lambda x: x.sum(1), args(f32(3, 4)), grad=True),
]
