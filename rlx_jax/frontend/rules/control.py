"""Control-flow companions that resolve statically.

`lax.platform_dependent` (used by jnp.diag, jnp.trace, ...) stages `platform_index` followed by
a `cond` on it. rlx_jax follows JAX's CPU choice: the branch listing "cpu", else the default
branch. The index becomes a Constant, and the tracer inlines a `cond` whose index is a Constant
(trace.py); any other `cond` stays unsupported.
"""
import numpy as np

from ...errors import UnsupportedPrimitiveError
from . import jaxpr_rule


@jaxpr_rule("platform_index")
def _platform_index(ctx, *, platforms, **params):
    chosen = [i for i, ps in enumerate(platforms) if ps is not None and "cpu" in ps]
    chosen = chosen or [i for i, ps in enumerate(platforms) if ps is None]
    if not chosen:
        raise UnsupportedPrimitiveError(
            f"lax.platform_dependent has no 'cpu' or default branch (platforms {platforms}); "
            f"give it a default branch")
    return ctx.b.const(np.int32(chosen[0]))
