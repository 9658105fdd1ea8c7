"""The jit replacement: `jax.jit` and `jax._src.api.jit`, when called from a test module or from
`jax._src.test_util`, give `rlx_jax.jit(fun, backend=...)`; every other caller (JAX's own
library code, rlx_jax itself) gets JAX's jit, so only the tests' compilations move."""
import functools
import importlib
import sys
from typing import Any

import jax
from .. import api as rlx_api
from .. import stages as rlx_stages
from ..backends.xla import direct as rlx_direct
from ..jax_internals import module as jax_module

jax_api = jax_module("api")

_ORIGINAL = {"jax": jax.jit, "api": jax_api.jit}
_WATCHED: dict[type, Any] = {}      # class -> its own as_text
_WATCHED_LOWER: dict[type, Any] = {}   # class -> its own lower
_CALL_FLAT = rlx_stages.Compiled.call_flat
_DIRECT_INIT = rlx_direct.DirectCall.__init__
_COUNTERS: dict[str, Any] = {}     # jax._src.test_util.count_* -> the original
# where tests register their primitives' XLA lowerings: JAX's module and its public re-export
_MLIR = (jax_module("mlir"), importlib.import_module("jax.interpreters.mlir"))
_REGISTER_LOWERING = _MLIR[0].register_lowering


class Shim:
    """Installed for one backend; `callers` are the module names whose jit calls move."""

    def __init__(self, backend, callers, options=None):
        self.backend, self.callers = backend, set(callers) | {"jax._src.test_util"}
        self.options = dict(options or {})
        self.jitted = 0          # rlx_jax.jit functions made (per case: reset by the worker)
        self.read_ir = 0         # calls of as_text on rlx_jax's stages (the tests read JAX's IR)
        self.calls = 0           # rlx_jax programs executed
        self.mlir_lowerings = 0  # MLIR lowerings the test registered (its primitives' meaning)

    def jit(self, fun=None, /, _depth=1, **kwargs):
        """jax.jit's signature; rlx_jax.jit when the caller is test code."""
        caller = sys._getframe(_depth).f_globals.get("__name__", "")
        if caller not in self.callers:
            return _ORIGINAL["jax"](fun, **kwargs) if fun is not None else \
                functools.partial(_ORIGINAL["jax"], **kwargs)
        if fun is None:
            return functools.partial(self._make, **kwargs)
        return self._make(fun, **kwargs)

    def _make(self, fun, **kwargs):
        self.jitted += 1
        platform = kwargs.pop("backend", None)      # jax.jit's XLA platform: rlx_jax refuses it
        backend = self.backend if platform is None else platform
        return rlx_api.jit(fun, backend=backend, **{**self.options, **kwargs})

    def install(self):
        def jit(fun=None, /, **kwargs):      # a function: jax._src.test_util sets attributes on it
            return self.jit(fun, _depth=2, **kwargs)
        jit.__doc__ = self.jit.__doc__
        jax.jit = jax_api.jit = jit
        for cls in (rlx_stages.Lowered, rlx_stages.Compiled):
            self._watch(cls)
        self._watch_lower(rlx_stages.Traced)
        def call_flat(compiled, leaves):      # every rlx_jax execution, cached ones included
            self.calls += 1
            return _CALL_FLAT(compiled, leaves)
        rlx_stages.Compiled.call_flat = call_flat

        def direct_init(direct, jitted):      # xla's cached calls through jax.jit's dispatch
            _DIRECT_INIT(direct, jitted)
            call = direct.call

            def counted(*args, **kwargs):
                self.calls += 1
                return call(*args, **kwargs)
            direct.call = counted
        rlx_direct.DirectCall.__init__ = direct_init
        jtu = jax_module("test_util")
        for name in [n for n in dir(jtu) if n.startswith("count_")]:
            self._watch_counter(jtu, name)

        def register_lowering(*args, **kwargs):   # a primitive defined by its XLA lowering
            self.mlir_lowerings += 1
            return _REGISTER_LOWERING(*args, **kwargs)
        for m in _MLIR:
            m.register_lowering = register_lowering
        return self

    def _watch_counter(self, module, name):
        """jtu.count_* count JAX's own dispatch, tracing and compile events (its C++ fast path,
        its lowerings): a test asserting them reads JAX's internals (an API difference if it
        fails)."""
        original = _COUNTERS.setdefault(name, getattr(module, name))

        @functools.wraps(original)
        def counter(*args, **kwargs):
            self.read_ir += 1
            return original(*args, **kwargs)
        setattr(module, name, counter)

    def _watch(self, cls):
        """Counts the test's reads of program text: a test that reads StableHLO or HLO text
        inspects JAX's compiler, not the result (report.py: an API difference if it fails)."""
        original = _WATCHED.setdefault(cls, cls.as_text)

        @functools.wraps(original)
        def as_text(stage, *args, **kwargs):
            self.read_ir += 1
            return original(stage, *args, **kwargs)
        cls.as_text = as_text

    def _watch_lower(self, cls):
        """Traced.lower with JAX's lowering keywords (jax.export's) asks for StableHLO: a test
        doing so reads JAX's compiler (an API difference if it fails)."""
        original = _WATCHED_LOWER.setdefault(cls, cls.lower)

        @functools.wraps(original)
        def lower(stage, *args, **kwargs):
            self.read_ir += bool(kwargs)
            return original(stage, *args, **kwargs)
        cls.lower = lower

    @staticmethod
    def uninstall():
        jax.jit, jax_api.jit = _ORIGINAL["jax"], _ORIGINAL["api"]
        rlx_stages.Compiled.call_flat = _CALL_FLAT
        rlx_direct.DirectCall.__init__ = _DIRECT_INIT
        for m in _MLIR:
            m.register_lowering = _REGISTER_LOWERING
        for cls, original in _WATCHED.items():
            cls.as_text = original
        for cls, original in _WATCHED_LOWER.items():
            cls.lower = original
        jtu = jax_module("test_util")
        for name, original in _COUNTERS.items():
            setattr(jtu, name, original)
