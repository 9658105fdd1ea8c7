"""rlx_jax.jit: trace -> IR -> legalize -> lower -> cached executable.

Cache key: (input pytree structure, leaf shapes/dtypes/weak types, static argument values);
the backend and options are fixed per Jitted object. A repeated call does no tracing. Results
carry the jaxpr's output weak types (as jax.jit's); rlx_jax's own work runs under numpy_rules.
"""
import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

import jax

from . import options as _options
from . import distributed, interop, methods, nesting, stages, symbolic
from . import jax_internals
from .arguments import (FAST_SIGNATURES, PLAIN_ARRAY_TYPES, DirectCall, FlatCall, FlatFun,
                        TracedArgument, flat_function, function_name,
                        static_args, key_boundary, leaf_names, leaf_signature, out_specs,
                        output_names, raise_unhashable, weak_types)
from .backends.base import NotCompiled, all_backends, available_backends, get_backend
from .errors import BadArgumentError, RlxError
from .frontend.trace import graph_from_jaxpr
from .ir import Graph, prng
from .numpy_rules import with_own_numpy_rules
from .passes.recognize import recognize
from .placement import Placement, place, raise_host
from .stages import RECORDERS, Compiled, Lowered  # noqa: F401 - rlx_jax.api's public names


_METADATA = ("__module__", "__name__", "__qualname__", "__doc__")
_CONFIG = jax_internals.module("config")
_X64, _trace_context = _CONFIG.enable_x64, _CONFIG.trace_context
_flatten = jax.tree_util.tree_flatten
Key = tuple[Any, ...]      # a cache_key
# Jitted._trace's (ClosedJaxpr, traced graph, result tree, timings, arguments.KeyBoundary)
TraceResult = tuple[Any, Graph, jax.tree_util.PyTreeDef, dict[str, float], Any]


def cache_key(tree: jax.tree_util.PyTreeDef, sigs: tuple[Any, ...],
              statics: tuple[Any, ...]) -> Key:
    """The executable cache's key of a call: the dynamic leaves' pytree structure and
    signatures, the static arguments, and JAX's trace context (the configuration jax.jit keys
    its own cache on: x64, PRNG and dtype-promotion modes, ...). Jitted._key and the xla
    backend's direct calls (backends/xla/direct.py) both key the cache with it."""
    return (tree, sigs, statics, _trace_context())


P = ParamSpec("P")
R = TypeVar("R")



class Jitted(Generic[P, R]):
    """What `jit` returns: called like the function it wraps (`P`: its parameters), with the
    function's result structure (`R`, its leaves as the `output` option gives them)."""
    def __init__(self, fun: Callable[P, R], backend: str, static_argnums: int | Sequence[int],
                 static_argnames: str | Sequence[str], options: Mapping[str, Any]) -> None:
        self.fun = fun
        self.backend_name = backend
        self.options = dict(options)
        for attr in _METADATA:            # the wrapped function's metadata, never its __dict__
            try:                          # (jax.grad's wrapper carries an inner Jitted's state)
                setattr(self, attr, getattr(fun, attr))
            except AttributeError:
                pass
        self.__name__ = function_name(fun)
        self.__wrapped__ = fun
        self._sig: inspect.Signature | None
        try:
            self._sig = inspect.signature(fun)
        except (TypeError, ValueError):
            self._sig = None
        self.static_argnums, self.static_argnames = static_args(
            self._sig, static_argnums, static_argnames)
        self._cache: dict[Key, FlatCall[R]] = {}
        self._functions: dict[Key, Any] = {}
        self._lock = threading.Lock()
        self._backend = None
        # Backend.direct_call's, made after a first compile
        self._direct: DirectCall[R] | Literal[False] | None = None
        self._method: Jitted[..., R] | None = None
        # _remember's (count, checks, trace context, Compiled)
        self._last: tuple[int, tuple[Any, ...], Any, FlatCall[R]] | None = None
        self.trace_count = 0
        shapes = self.options.get("polymorphic_shapes")
        self._poly = None if shapes is None else symbolic.Polymorphic(
            shapes, self.options.get("polymorphic_constraints"))

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """`@jit` on a method (methods.py: the instance static unless it is a pytree of
        arrays)."""
        return methods.bind(self, obj, self._static_self)

    def _static_self(self) -> "Jitted[..., R]":
        if self._method is None:
            self._method = Jitted(self.fun, self.backend_name,
                                  tuple(self.static_argnums | {0}), (), self.options)
        return self._method

    # ---- argument handling ----
    def split_statics(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> tuple[tuple[Any, ...], tuple[Any, ...], dict[str, Any]]:
        """(static (position or name, value) pairs, dynamic args, dynamic kwargs) of a call."""
        if not self.static_argnums and not self.static_argnames:
            return (), args, kwargs          # the common case, on every cached call
        n = len(args)
        nums = {i % n if i < 0 else i for i in self.static_argnums if -n <= i < n}
        statics = tuple((i, args[i]) for i in sorted(nums))
        statics += tuple(sorted((k, v) for k, v in kwargs.items() if k in self.static_argnames))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        try:
            hash(statics)
        except TypeError:
            raise_unhashable(self.__name__, statics)
        return statics, dyn_args, dyn_kwargs

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Key, list[Any]]:
        """(cache_key, dynamic leaves) of a call: one flatten, the leaves' signatures per type
        (arguments.FAST_SIGNATURES: no per-leaf probing for the common types)."""
        if self.static_argnums or self.static_argnames:
            statics, args, kwargs = self.split_statics(args, kwargs)
        else:
            statics = ()
        leaves, tree = _flatten((args, kwargs))
        x64 = _X64.value
        fast = FAST_SIGNATURES
        try:
            sigs = tuple([fast[type(x)](x, x64) for x in leaves])
        except KeyError:
            sigs = self._signatures(leaves, args, kwargs, x64)
        return cache_key(tree, sigs, statics), leaves

    def _signatures(self, leaves: list[Any], dyn_args: tuple[Any, ...],
                    dyn_kwargs: dict[str, Any], x64: bool) -> tuple[Any, ...]:
        """leaf_signature of each leaf; a bad leaf's error names its pytree path."""
        sigs = []
        for i, x in enumerate(leaves):
            try:
                sigs.append(leaf_signature(x, f"#{i}", x64))
            except BadArgumentError:
                paths = [("args" if p[0].idx == 0 else "kwargs") + jax.tree_util.keystr(p[1:])
                         for p, _ in jax.tree_util.tree_flatten_with_path(
                             (dyn_args, dyn_kwargs))[0]]
                leaf_signature(x, f"{paths[i]} of {self.__name__}")
        return tuple(sigs)

    # ---- tracing ----

    def _check_signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._sig is not None:
            try:
                self._sig.bind(*args, **kwargs)
            except TypeError as e:
                raise BadArgumentError(f"{self.__name__}: {e}") from None

    def _trace(self, key: Key, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TraceResult:
        tree, sigs, statics = key[:3]
        static_pos = dict(s for s in statics if isinstance(s[0], int))
        flat_fun = flat_function(self.fun, tree, statics)
        out_tree = flat_fun.out_trees
        structs = [jax.ShapeDtypeStruct(s, prng.jax_dtype(d), weak_type=w) for s, d, w in sigs]
        self._check_signature(args, kwargs)
        t0 = time.perf_counter()
        with nesting.tracing(), \
                distributed.binding(self.__name__, self.options.get("axis_name")) as env:
            closed = jax.make_jaxpr(flat_fun, axis_env=env)(*structs)
        nesting.refuse_closed_over_tracers(self.__name__, closed)
        if closed.effects:
            nesting.refuse_outer_axes(self.__name__, closed, self.options.get("axis_name"))
        t1 = time.perf_counter()
        graph = graph_from_jaxpr(closed, name=self.__name__,
                                 host=self.options.get("fallback", "host") == "host")
        params = [p.name for p in self._sig.parameters.values()] if self._sig else []
        n = len(jax.tree_util.tree_unflatten(tree, [0] * tree.num_leaves)[0]) + len(static_pos)
        dyn_positions = [i for i in range(n) if i not in static_pos]
        graph.input_names = leaf_names(params, dyn_positions,
                                       *jax.tree_util.tree_unflatten(tree, range(len(sigs))))
        graph.output_names = output_names(out_tree[0])
        t2 = time.perf_counter()
        self.trace_count += 1
        return closed, graph, out_tree[0], {"make_jaxpr": t1 - t0, "frontend": t2 - t1}, \
            key_boundary(closed)

    def _place(self, graph: Graph) -> Placement:
        """The Placement of `graph` on this function's backend; for backend="auto", on the
        first available backend that runs it all, else the one with the fewest host ops."""
        names = available_backends() if self.backend_name == "auto" else [self.backend_name]
        best: Placement | None = None
        for name in names:
            fallback = "host" if len(names) > 1 else self.options.get("fallback", "host")
            placed = place(graph, get_backend(name), self.options.get("native_backward", True),
                           fallback, self._backend_options(),
                           fold=self.options.get("fold_constants", True))
            if placed.device_only:
                return placed
            if best is None or len(placed.host) < len(best.host):
                best = placed
        assert best is not None
        if self.options.get("fallback") == "error":
            raise_host(best.graph, best.backend, best.host)
        return best

    def _backend_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.options.items() if k not in _options.COMMON}

    def trace(self, *args: Any, **kwargs: Any) -> stages.Traced:
        """The stages.Traced of a call: `.jaxpr`, `.graph`, `.lower()`. Its arguments (and
        lower's) are typed as jax.jit's: arrays or jax.ShapeDtypeStructs for the function's."""
        key = self._static_key(args, kwargs)
        traced = self._trace(key, args, kwargs)
        return stages.Traced(traced[0], traced[1], lambda: self._lower(key, args, kwargs, traced))

    def lower(self, *args: Any, **kwargs: Any) -> "Lowered | symbolic.SymbolicLowered":
        """The Lowered of a call; with jax.ShapeDtypeStructs of symbolic shape (jax.export's),
        a symbolic.SymbolicLowered serving every size."""
        key = self._static_key(args, kwargs)
        if symbolic.is_symbolic_call(key):
            return symbolic.SymbolicLowered(self, key,
                                            symbolic.trace_symbolic(self, key, args, kwargs))
        if self._poly is not None:
            return symbolic.lowered_at(self, key, args, kwargs)
        return self._lower(key, args, kwargs)

    def _static_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key:
        try:
            return self._key(args, kwargs)[0]
        except TracedArgument as e:
            nesting.refuse(self.__name__, self.backend_name, e.args[0])

    def _lower(self, key: Key, args: tuple[Any, ...], kwargs: dict[str, Any],
               traced: TraceResult | None = None, placed: Placement | None = None) -> Lowered:
        """The Lowered of a call: traced (or `traced`: the _trace tuple), recognized and
        placed; or with `placed` (a Placement of `traced`'s graph, already legalized), as
        it is."""
        closed, graph, out_tree, timings, keys = traced or self._trace(key, args, kwargs)
        if placed is None and self.options.get("recognize", True):
            t0 = time.perf_counter()
            graph = recognize(graph)
            timings["recognize"] = time.perf_counter() - t0
        if placed is None:
            t0 = time.perf_counter()
            placed = self._place(graph)
            timings["legalize"] = time.perf_counter() - t0
        opts = self._backend_options()
        opts["output"] = self.options.get("output", _options.DEFAULT_OUTPUT)
        lowered = Lowered(graph, placed, opts, key[0], out_tree, timings, self.__name__, keys,
                          weak_types(closed))
        lowered.out_specs = out_specs(closed)
        lowered.fallback = self.options.get("fallback", "host")
        return lowered

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        last = self._last        # the previous call's, when its arguments were plain arrays
        a: Any
        if last is not None and not kwargs and len(args) == last[0]:
            for a, (t, shape, dtype) in zip(args, last[1]):
                if type(a) is not t or a.shape != shape or a.dtype != dtype:
                    break
            else:
                if _trace_context() == last[2]:
                    return last[3].call_flat(args)
        direct = self._direct
        if direct is False and not (self.static_argnums or self.static_argnames):
            leaves, tree = _flatten((args, kwargs))      # the cached call, inline: _key's work
            x64, fast = _X64.value, FAST_SIGNATURES
            context = _trace_context()
            try:
                sigs = tuple([fast[type(x)](x, x64) for x in leaves])
                compiled = self._cache.get((tree, sigs, (), context))
            except KeyError:
                compiled = None
            if compiled is not None:
                if not kwargs:
                    self._remember(args, leaves, context, compiled)
                return compiled.call_flat(leaves)
        elif direct and direct.usable():
            try:
                return direct.call(*args, **kwargs)
            except NotCompiled:
                pass
            except TypeError:             # an argument jax.jit does not take: ours converts it
                self._direct = False      # or says what is wrong; stop trying jax.jit's path
            except OverflowError:         # rlx_jax's own message, below
                pass
        try:
            key, leaves = self._key(args, kwargs)
        except TracedArgument as e:
            if nesting.inside_trace():
                return self.fun(*args, **kwargs)       # inlined into the outer rlx_jax trace
            return cast(R, interop.bind(self, args, kwargs))   # one rlx_call (interop.py)
        compiled = self._cache.get(key)
        if compiled is None:
            try:
                compiled = self._compile(key, args, kwargs)
            except nesting.OuterTransformation:     # it needs an enclosing trace's values
                if nesting.inside_trace():
                    return self.fun(*args, **kwargs)       # inlined into the rlx_jax trace
                return cast(R, interop.bind(self, args, kwargs))   # rlx_call takes them as inputs
        return compiled.call_flat(leaves)

    def _compile(self, key: Key, args: tuple[Any, ...], kwargs: dict[str, Any]
                 ) -> FlatCall[R]:
        """The Compiled of `key`, made once (under the lock) and cached."""
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is None and self._poly is not None:
                compiled = self._cache[key] = symbolic.compiled_at(self, key, args, kwargs)
            elif compiled is None:
                compiled = self._lower(key, args, kwargs).compile()
                self._cache[key] = compiled
                if self._direct is None and self.backend_name != "auto":
                    self._direct = get_backend(self.backend_name).direct_call(self) or False
        return compiled

    def _remember(self, args: tuple[Any, ...], leaves: list[Any], context: Any,
                  compiled: FlatCall[R]) -> None:
        """Keeps a call whose arguments are all positional arrays of PLAIN_ARRAY_TYPES (its
        leaves are its arguments) as the last call: the next call with arrays of the same types,
        shapes and dtypes under the same trace context reuses its Compiled with no pytree
        flatten and no signature tuples (what MLX's own calls with mx.arrays do every step)."""
        if len(leaves) == len(args) and all(type(a) in PLAIN_ARRAY_TYPES for a in args):
            self._last = (len(args), tuple([(type(a), a.shape, a.dtype) for a in args]),
                          context, compiled)

    def compiled(self, key: Key) -> FlatCall[R] | None:
        """The Compiled of a cache_key, or None when that signature is not compiled yet."""
        return self._cache.get(key)

    def clear_cache(self) -> None:
        self._cache.clear()
        self._last = None
        if self._poly is not None:             # the symbolic traces too
            self._poly.programs.clear()
            self._poly.prepared.clear()
        if self._direct:
            self._direct = None

    # ---- what interop.bind needs ----
    def flat_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[tuple[Any, ...], FlatFun, list[Any]]:
        """(statics, the flat function of the dynamic leaves, those leaves) of a call."""
        self._check_signature(args, kwargs)
        statics, dyn_args, dyn_kwargs = self.split_statics(args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        return statics, flat_function(self.fun, tree, statics), leaves

    def rlx_function(self, key: Key, make: Callable[[], Any]) -> Any:
        """The interop.RlxFunction (and its result info) of one call signature, made once."""
        with self._lock:
            if key not in self._functions:
                self._functions[key] = make()
            return self._functions[key]

    def like(self, fun: Callable[..., Any], output: str) -> "Jitted[..., Any]":
        """A Jitted of `fun` (flat leaves, no statics) on this backend with these options."""
        return Jitted(fun, self.backend_name, (), (), dict(self.options, output=output))


@overload
def jit(fun: Callable[P, R], *, backend: str = ..., static_argnums: int | Sequence[int] = ...,
        static_argnames: str | Sequence[str] = ..., **options: Any) -> Jitted[P, R]: ...


@overload
def jit(fun: None = None, *, backend: str = ..., static_argnums: int | Sequence[int] = ...,
        static_argnames: str | Sequence[str] = ...,
        **options: Any) -> Callable[[Callable[P, R]], Jitted[P, R]]: ...


def jit(fun: Callable[P, R] | None = None, *, backend: str = "auto",
        static_argnums: int | Sequence[int] = (), static_argnames: str | Sequence[str] = (),
        **options: Any) -> Jitted[P, R] | Callable[[Callable[P, R]], Jitted[P, R]]:
    """Compiles `fun` for an Apple ML backend ("mlx", "coreml"), the reference "xla", or "auto".

    Usable as `@jit`, `@jit(backend=...)` or `jit(fun, ...)`. Options are passed to the backend
    (e.g. `native_backward=False`, Core ML's `compute_precision`); jax.jit's keywords are
    accepted as options.py says (`donate_argnums`, `keep_unused`, `inline`: no-ops).
    """
    backends = all_backends()
    _options.check_backend(backend, backends)
    _options.check_options(backend, options, backends)
    if fun is None:
        return cast(Callable[[Callable[P, R]], Jitted[P, R]], functools.partial(
            jit, backend=backend, static_argnums=static_argnums, static_argnames=static_argnames,
            **options))
    if not callable(fun):
        raise BadArgumentError(f"jit expects a function, got {type(fun).__name__}")
    return Jitted(fun, backend, static_argnums, static_argnames, options)


__all__ = ["jit", "Jitted", "Lowered", "Compiled", "RlxError"]
