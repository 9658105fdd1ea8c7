"""rlx_jax's own jnp code runs under JAX's default numpy rules, whatever the caller set.

`jax.numpy_dtype_promotion("strict")` and `jax.numpy_rank_promotion("raise")` (JAX's test
suite runs under both) are the user's choice for the user's code. The code rlx_jax traces or
evaluates itself (the frontend's rules and decompositions, shape inference from the reference
semantics, the legalize and lowering passes, the reference backend's re-emission, the rlx
primitives' reference implementations) is written for the defaults ("standard", "allow") and
runs under them. Where strict rules accept a program they compute what the defaults compute, so
this changes no result; it only keeps rlx_jax from refusing its own code. The user's function
itself is still traced under the user's rules (api.py traces it outside of these).
"""
import contextlib
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def own_numpy_rules():
    """JAX's default dtype and rank promotion for the code run inside."""
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def with_own_numpy_rules(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run under own_numpy_rules()."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with own_numpy_rules():
            return fn(*args, **kwargs)
    return run
