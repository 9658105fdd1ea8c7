"""`--eager`: JAX's own executions outside any jit (op-by-op primitives, library functions
such as `jnp.sin` or `jax.nn.relu` called eagerly, `check_grads`' jvp/vjp calls) run through
rlx_jax too, as they would through a device plugin. JAX runs each of them by compiling its
jaxpr (`jax._src.pjit._pjit_call_impl_python`); here that jaxpr is an rlx_jax program
instead, cached per jaxpr. While rlx_jax itself runs (its xla backend, host segments), JAX's own
compile path is used, so nothing recurses."""
import threading

from .. import api as rlx_api
from ..jax_internals import module as jax_module

core, pjit = jax_module("core"), jax_module("pjit")

_ORIGINAL = pjit._pjit_call_impl_python


class Eager:
    def __init__(self, backend, options):
        self.backend, self.options = backend, dict(options)
        self.programs = {}         # jaxpr -> its rlx_jax.jit function
        self.calls = 0             # executions moved (per case: reset by the worker)
        self._inside = threading.local()

    def _impl(self, *args, jaxpr, **params):
        if getattr(self._inside, "on", False) or jaxpr.effects:
            return _ORIGINAL(*args, jaxpr=jaxpr, **params)
        fn = self.programs.get(jaxpr)
        if fn is None:
            fn = self.programs[jaxpr] = rlx_api.jit(core.jaxpr_as_fun(jaxpr),
                                                    backend=self.backend, **self.options)
        self._inside.on = True
        try:
            outs = fn(*args)
        finally:
            self._inside.on = False
        self.calls += 1
        # no executable: JAX keeps no fast path, so every call comes back here
        return list(outs), None, None, []

    def install(self):
        pjit._pjit_call_impl_python = self._impl
        return self

    @staticmethod
    def uninstall():
        pjit._pjit_call_impl_python = _ORIGINAL
