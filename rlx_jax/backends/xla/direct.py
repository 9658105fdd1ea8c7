"""The xla backend's cached call through jax.jit's own dispatch.

A cached rlx_jax.jit call does in Python what jax.jit does in C++: flatten the arguments, key
the cache on their signature, call the executable, unflatten the results (about 10 µs here
against jax.jit's 7.5 µs in all for a tiny program). The xla backend's executables are jax.jit
functions, so its calls can go through jax.jit's C++ dispatch instead: `DirectCall` is a
jax.jit of a body with the user's own signature (static arguments included) which, traced once
per signature by jax.jit, looks up the rlx_jax program compiled for it and calls its
re-emitted function on the tracers, with the typed-key boundary and the results' weak types as
`Compiled.call_flat` gives them. Nothing is traced or compiled in the body: a signature rlx_jax
has not compiled yet raises NotCompiled, and the call takes the ordinary path, which compiles it.

Jitted uses it only where it gives the same results as the ordinary path: at the top level (no
JAX transformation or rlx_jax trace active: inside one, the ordinary path binds rlx_jax's own
primitive), with `output="jax"`, `jax_debug_nans`/`jax_debug_infs` and `jax.disable_jit` off
(their handling is rlx_jax's), and for programs whose executable is a whole jax.jit function.
An argument jax.jit does not take (an mx.array, a non-array) raises TypeError there; the call
then takes the ordinary path, which converts it or raises rlx_jax's own error, and the
function stops using DirectCall.
"""
import jax

from ... import jax_internals
from ...api import cache_key
from ...arguments import narrowed, numpy_dtype
from ..base import NotCompiled

_LAX = jax_internals.module("lax")
_CORE = jax_internals.module("core")
_CONFIG = jax_internals.module("config")
_OFF = (_CONFIG.debug_nans, _CONFIG.debug_infs, _CONFIG.disable_jit)


def _signature(x, x64):
    aval = x.aval
    return (aval.shape, narrowed(numpy_dtype(aval.dtype), x64), bool(aval.weak_type))


def _typed(x, weak):
    return x if x.aval.weak_type == weak else _LAX._convert_element_type(x, weak_type=weak)


class DirectCall:
    """Backend.direct_call of the xla backend (see the module's text)."""

    def __init__(self, jitted):
        self._jitted = jitted
        self.call = jax.jit(self._body, static_argnums=tuple(sorted(jitted.static_argnums)),
                            static_argnames=tuple(sorted(jitted.static_argnames)))

    @staticmethod
    def usable():
        """At the top level, with JAX's checks and disable_jit off."""
        d0, d1, d2 = _OFF
        return not (d0.value or d1.value or d2.value) and _CORE.trace_state_clean()

    @staticmethod
    def of(jitted):
        """A DirectCall for `jitted`, or None where it cannot give the ordinary path's
        results: another output than "jax", negative static positions (jax.jit resolves
        them against a signature the body does not have)."""
        if jitted.options.get("output", "jax") != "jax" or \
                any(i < 0 for i in jitted.static_argnums):
            return None
        return DirectCall(jitted)

    def _body(self, *args, **kwargs):
        j = self._jitted
        statics, dyn_args, dyn_kwargs = j.split_statics(args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        x64 = _CONFIG.enable_x64.value
        compiled = j.compiled(cache_key(tree, tuple(_signature(x, x64) for x in leaves),
                                        statics))
        run = getattr(getattr(compiled, "executable", None), "jitted", None)
        if run is None or compiled.output != "jax":
            raise NotCompiled()
        keys = compiled.lowered.keys
        if keys is not None:
            leaves = keys.args(leaves)
        outs = run(*leaves)
        weak = compiled.lowered.out_weak
        outs = [_typed(o, w) for o, w in zip(outs, weak)]
        if keys is not None:
            outs = keys.results(outs)
        return jax.tree_util.tree_unflatten(compiled.lowered.out_tree, outs)
