"""What an rlx_jax.jit function does when it is called on JAX tracers.

Inside another rlx_jax.jit trace (`rlx_jax.jit(jax.grad(f))` where `f` is itself an
rlx_jax.jit function, or a jitted helper called from a jitted function) the call is inlined:
the outer trace records the function's operations, and the outer program's backend compiles
the whole, as `jax.jit` inlines a nested `jax.jit`. Called on the tracers of a JAX
transformation outside of rlx_jax (`jax.grad(f)`, `jax.vmap(f)`, `jax.jit` of a caller) it
binds the `rlx_call` primitive (interop.py), whose rules compile the transformed function for
the same backend. `Jitted.lower` / `Jitted.trace` on tracers raise
`UnsupportedTransformationError` naming the call site: a Lowered is built from concrete shapes.
"""
import contextlib
import functools
import os
import sys
import threading
from typing import NoReturn

import jax

from .errors import UnsupportedTransformationError

_STATE = threading.local()
_LIBRARY = (tuple(os.path.dirname(m.__file__ or "") + os.sep
                  for m in (jax, sys.modules[__name__.split(".")[0]]))
            + (contextlib.__file__, functools.__file__))


@contextlib.contextmanager
def tracing():
    """Marks the current thread as tracing an rlx_jax.jit function."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


def inside_trace():
    return getattr(_STATE, "depth", 0) > 0


def is_tracer(x):
    return isinstance(x, jax.core.Tracer)


def _call_site():
    """file:line of the innermost frame outside jax, the standard library and rlx_jax."""
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith(_LIBRARY) and not path.startswith("<frozen"):
            return f"{path}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def refuse(name, backend, tracer) -> NoReturn:
    raise UnsupportedTransformationError(
        f"{name}.lower / .trace (an rlx_jax.jit function, backend {backend!r}) was called on "
        f"JAX tracers ({type(tracer).__name__}) at {_call_site()}: a Lowered is made for "
        f"concrete shapes. Call {name} itself under the transformation (it binds rlx_call and "
        f"runs on {backend!r}), or lower it outside with jax.ShapeDtypeStruct arguments") from None


class OuterTransformation(UnsupportedTransformationError):
    """The traced function closes over tracers of an outer JAX transformation, or uses the
    axis name of an outer `jax.vmap` (lax.axis_index, psum, ...): a call of it binds rlx_call
    in that transformation (interop.py: the tracers become inputs, the vmap batches it with its
    axis name); `lower` / `trace`, which need a program of its own, refuse it."""


def refuse_outer_axes(name, closed_jaxpr, own=None):
    """Raises OuterTransformation if the traced function uses axis names other than `own`
    (its distributed axis_name): they are bound by an enclosing jax.vmap."""
    named = {e.name for e in closed_jaxpr.effects if type(e).__name__ == "NamedAxisEffect"}
    outer = sorted(str(n) for n in named - {own})
    if outer:
        raise OuterTransformation(
            f"{name} (an rlx_jax.jit function) uses the axis name(s) {', '.join(outer)} of an "
            f"enclosing jax.vmap, called at {_call_site()}: a program of its own cannot hold "
            f"them. Call {name} itself there (the vmap batches its rlx_call with that axis)")


def refuse_closed_over_tracers(name, closed_jaxpr):
    """Raises UnsupportedTransformationError if the traced function closed over values of an
    outer JAX transformation (they are constants of its jaxpr that are still tracers)."""
    tracers = [c for c in closed_jaxpr.consts if is_tracer(c)]
    if tracers:
        raise OuterTransformation(
            f"{name} (an rlx_jax.jit function) closes over {len(tracers)} value(s) traced by an "
            f"outer JAX transformation ({type(tracers[0]).__name__} "
            f"{jax.typeof(tracers[0]).str_short()}), called at {_call_site()}: a compiled "
            f"program cannot hold them. Call {name} itself there (a call takes them as inputs "
            f"of its rlx_call), or pass them as arguments") from None
