"""JAX's `jax_debug_nans` / `jax_debug_infs` for rlx_jax programs: with either set (the config
option or its context manager, `jax.debug_nans(True)`), each call's floating results are checked
and a NaN / an infinity raises FloatingPointError, as jax.jit does. JAX then reruns the program
op by op to name the primitive; rlx_jax's backends run whole programs, so the error names the
function and the result instead."""
import jax
import numpy as np

from . import jax_internals

_CONFIG = jax_internals.module("config")
# the options' State objects (a cached call reads them directly)
DEBUG_NANS, DEBUG_INFS, _DISABLE_JIT = _CONFIG.debug_nans, _CONFIG.debug_infs, _CONFIG.disable_jit


def enabled():
    return DEBUG_NANS.value or DEBUG_INFS.value


def check(outs, name):
    """Raises FloatingPointError for the first result holding a checked invalid value."""
    nans, infs = jax.config.jax_debug_nans, jax.config.jax_debug_infs
    for i, out in enumerate(outs):
        a = np.asarray(out)
        if not np.issubdtype(a.dtype, np.inexact):
            if a.dtype.name != "bfloat16":
                continue
            a = a.astype(np.float32)
        if nans and np.isnan(a).any():
            what = "nan"
        elif infs and np.isinf(a).any():
            what = "inf"
        else:
            continue
        raise FloatingPointError(
            f"invalid value ({what}) encountered in rlx_jax.jit({name}), result {i} of "
            f"{len(outs)} (jax_debug_{what}s is set)")


def unchecked(jitted):
    """`jitted` (a jax.jit function that runs rlx_jax's own code: the xla backend, host
    segments) called with JAX's checks off while they are on: rlx_jax checks the results of
    the whole program itself (check), JAX's op-by-op rerun would stop inside rlx_jax's code.
    `jax.disable_jit()` does not reach it either: it turns off jax.jit, and an rlx_jax.jit
    program runs on its backend under it, on every backend alike. `.jitted` is `jitted`."""
    def call(*args):
        if not (DEBUG_NANS.value or DEBUG_INFS.value or _DISABLE_JIT.value):
            return jitted(*args)
        with jax.debug_nans(False), jax.debug_infs(False), jax.disable_jit(False):
            return jitted(*args)
    call.jitted = jitted
    return call
