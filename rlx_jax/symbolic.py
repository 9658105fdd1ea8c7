"""Symbolic shapes: one trace of a function serves every size.

`rlx_jax.jit(f, polymorphic_shapes=..., polymorphic_constraints=...)` (the names of jax2tf's
keywords, with jax.export's shape syntax: `"b, t, 16"`, `"(b, _, 16)"`, `"b, ..."`) traces `f`
once per pytree structure and dtypes with jax.export's symbolic dimensions, and keeps the RLX
IR symbolic. A call binds its arguments' shapes to the symbols (ir/instantiate.py `bind`:
mismatches and broken constraints are refused before anything runs), instantiates the graph
at that size and lowers it for the backend; each size's program is cached like any signature.

`Jitted.lower(*args)` with `jax.ShapeDtypeStruct`s of symbolic shape gives a SymbolicLowered:
the symbolic IR, `.instantiate(**sizes)` (a backend's Lowered at one size) and `.compile()` (a
callable serving every size).
"""
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

import jax

from .errors import (BadArgumentError, RefusalError, RlxError, ShapeConstraintError,
                     SymbolicShapeError)
from .ir import Graph, dims
from .ir.instantiate import bind, instantiate
from .stages import Compiled, Lowered

Key = tuple[Any, ...]      # an api.cache_key
# a Jitted._trace result: (ClosedJaxpr, graph, result tree, timings, arguments.KeyBoundary)
Traced = tuple[Any, ...]


class Jitted(Protocol):
    """What this module uses of an api.Jitted (api.py imports this module)."""
    backend_name: str
    options: dict[str, Any]
    _poly: "Polymorphic | None"

    @property
    def __name__(self) -> str: ...

    def split_statics(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> tuple[tuple[Any, ...], tuple[Any, ...], dict[str, Any]]: ...

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Key, list[Any]]: ...

    def _trace(self, key: Key, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Traced: ...

    def _lower(self, key: Key, args: Any, kwargs: Any, traced: Any = None,
               placed: Any = None) -> Lowered: ...

    def _backend_options(self) -> dict[str, Any]: ...

_poly = dims._poly
_PKG = os.path.dirname(os.path.abspath(__file__))
_JAX = os.path.dirname(os.path.abspath(jax.__file__))


class Polymorphic:
    """A Jitted's polymorphic_shapes: its scope (constraints) and the symbolic programs traced
    so far, one per symbolic signature."""

    def __init__(self, shapes: Any, constraints: Sequence[str] | None) -> None:
        self.shapes = shapes
        try:
            self.scope = jax.export.SymbolicScope(tuple(constraints or ()))
        except Exception as e:  # noqa: BLE001 - jax.export's parse error, retyped
            raise BadArgumentError(f"polymorphic_constraints={constraints!r}: {e}") from None
        self.programs: dict[Key, Traced] = {}
        self.prepared: dict[Key, Prepared] = {}   # symbolic signature -> Prepared (compiled_at)

    def specs(self, jitted: Jitted, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> list[jax.ShapeDtypeStruct]:
        """The symbolic ShapeDtypeStructs of the dynamic leaves of one call, in leaf order."""
        statics, dyn_args, dyn_kwargs = jitted.split_statics(args, kwargs)
        shapes = self.shapes
        if isinstance(shapes, (list, tuple)):
            nums = {p for p, _ in statics if isinstance(p, int)}
            if len(shapes) != len(args):
                raise BadArgumentError(
                    f"{jitted.__name__}: polymorphic_shapes has {len(shapes)} entries for "
                    f"{len(args)} positional arguments (one each; None for a static shape)")
            shapes = tuple(s for i, s in enumerate(shapes) if i not in nums)
        try:
            return jax.tree_util.tree_leaves(jax.export.symbolic_args_specs(
                (dyn_args, dyn_kwargs), (shapes, None), scope=self.scope))
        except Exception as e:  # noqa: BLE001 - jax.export's message, retyped
            # a call whose ranks or fixed sizes differ from the spec's, or a bad spec
            error = ShapeConstraintError if ("known dimension" in str(e) or "rank" in str(e)) \
                else BadArgumentError
            raise error(f"{jitted.__name__}: polymorphic_shapes={self.shapes!r} does not fit "
                        f"the arguments: {e}") from None


def symbolic_key(key: Key, specs: Sequence[jax.ShapeDtypeStruct]) -> Key:
    """`key` (api.cache_key) with each leaf's shape the symbolic one."""
    tree, sigs, statics, context = key
    sigs = tuple((tuple(s.shape), d, w) for s, (_, d, w) in zip(specs, sigs))
    return (tree, sigs, statics, context)


def leaf_labels(jitted: Jitted, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """A name per dynamic leaf for messages: args[0]['w'], kwargs['x'], ..."""
    _, dyn_args, dyn_kwargs = jitted.split_statics(args, kwargs)
    paths = jax.tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
    return [("args" if p[0].idx == 0 else "kwargs") + jax.tree_util.keystr(p[1:])
            for p, _ in paths]


def trace_symbolic(jitted: Jitted, skey: Key, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Traced:
    """Jitted._trace at the symbolic key, JAX's undecidable shape relations retyped."""
    try:
        return jitted._trace(skey, args, kwargs)
    except _poly.InconclusiveDimensionOperation as e:
        raise SymbolicShapeError(
            f"{jitted.__name__}{_user_line(e)}: with symbolic shapes "
            f"{[tuple(map(str, s[0])) for s in skey[1]]}, JAX cannot decide what the program "
            f"needs: {str(e).splitlines()[0]} Declare it with polymorphic_constraints (e.g. "
            f"'t <= 512'), give that dimension a static size, or write the program so it "
            f"holds for every size") from None


def lowered_at(jitted: Jitted, key: Key, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Lowered:
    """The Lowered of one concrete call `key` of a polymorphic Jitted: the symbolic program of
    its signature (traced once), bound to the call's shapes and instantiated."""
    poly = jitted._poly
    assert poly is not None
    specs = poly.specs(jitted, args, kwargs)
    skey = symbolic_key(key, specs)
    shapes = [s for s, _, _ in key[1]]
    env = bind([tuple(s.shape) for s in specs], shapes, leaf_labels(jitted, args, kwargs),
               list(poly.scope._explicit_constraints))
    traced = poly.programs.get(skey)
    if traced is None:
        traced = poly.programs[skey] = trace_symbolic(jitted, skey, args, kwargs)
    return lowered_from(jitted, key, traced, env)


def compiled_at(jitted: Jitted, key: Key, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Compiled:
    """The Compiled of one concrete call of a polymorphic Jitted. The symbolic graph is
    recognized and legalized once per symbolic signature; on a backend whose programs keep
    dimensions symbolic (Core ML), one program then serves every size when the whole graph
    lowers; otherwise each size instantiates the legalized graph, places and lowers it.
    `Prepared.reason` says why a signature has no one program."""
    poly = jitted._poly
    assert poly is not None
    if jitted.backend_name == "auto":          # the backend is chosen per program
        return lowered_at(jitted, key, args, kwargs).compile()
    specs = poly.specs(jitted, args, kwargs)
    skey = symbolic_key(key, specs)
    env = bind([tuple(s.shape) for s in specs], [s for s, _, _ in key[1]],
               leaf_labels(jitted, args, kwargs), list(poly.scope._explicit_constraints))
    prepared = poly.prepared.get(skey)
    if prepared is None:
        traced = poly.programs.get(skey)
        if traced is None:
            traced = poly.programs[skey] = trace_symbolic(jitted, skey, args, kwargs)
        prepared = poly.prepared[skey] = Prepared(jitted, skey, traced)
    return prepared.compiled(key, env)


class Prepared:
    """A symbolic signature's graph recognized and legalized once (`legal`: its Lowered, or
    None when legalization needs sizes), and on a backend with symbolic programs its one
    Compiled (`flexible`); `reason` says why there is no one program (None when there is)."""

    def __init__(self, jitted: Jitted, skey: Key, traced: Traced) -> None:
        from .backends.base import get_backend
        self.jitted, self.traced = jitted, traced
        self.legal: Lowered | None = None
        self.flexible: Compiled | None = None
        self.reason: str | None
        t0 = time.perf_counter()
        try:
            self.legal = SymbolicLowered(jitted, skey, traced).placed()
        except (SymbolicShapeError, dims.InconclusiveDimensionOperation) as e:
            # JAX cannot decide a relation a pass needs: each size is legalized on its own
            self.reason = f"legalization needs sizes: {str(e).splitlines()[0]}"
            return
        self.seconds = time.perf_counter() - t0
        self.reason = "the backend compiles a program per size"
        if get_backend(jitted.backend_name).symbolic_programs:
            self._flexible()

    def _flexible(self) -> None:
        assert self.legal is not None
        placed = self.legal.placement()
        if not placed.device_only:
            ops = sorted(set(placed.host.values()))
            self.reason = f"some ops need the host or static sizes: {'; '.join(ops)[:300]}"
            return
        try:
            self.flexible = self.legal.compile()
            self.reason = None
        except RefusalError as e:     # e.g. a symbol with no upper bound (Core ML's rule)
            self.reason = str(e).splitlines()[0]

    def compiled(self, key: Key, env: dict[str, int]) -> Compiled:
        if self.flexible is not None:
            return self.flexible
        if self.legal is None:
            return lowered_from(self.jitted, key, self.traced, env).compile()
        from .placement.plan import plan
        from .backends.base import kept_kinds
        jitted, legal = self.jitted, self.legal
        t0 = time.perf_counter()
        static = instantiate(legal.legalized, env)
        backend = legal.backend
        keep = kept_kinds(backend, jitted.options.get("native_backward", True))
        placed = plan(static, backend, keep, jitted.options.get("fallback", "host"),
                      jitted._backend_options())
        closed, graph, out_tree, timings, keys = self.traced
        timings = {"make_jaxpr": 0.0, "frontend": 0.0,
                   "instantiate": time.perf_counter() - t0}
        return jitted._lower(key, None, None, (closed, instantiate(graph, env), out_tree,
                                               timings, keys), placed=placed).compile()


def flexible_reason(jitted: Jitted, *args: Any, **kwargs: Any) -> str | None:
    """None when calls of `jitted` with arguments shaped like these share one program for
    every size; else why each size is compiled apart."""
    poly = jitted._poly
    assert poly is not None
    key = jitted._key(args, kwargs)[0]
    prepared = poly.prepared.get(symbolic_key(key, poly.specs(jitted, args, kwargs)))
    return "not compiled yet" if prepared is None else prepared.reason


def lowered_from(jitted: Jitted, key: Key, traced: Traced, env: dict[str, int]) -> Lowered:
    closed, graph, out_tree, timings, keys = traced
    t0 = time.perf_counter()
    static = instantiate(graph, env)
    timings = dict(timings, make_jaxpr=0.0, frontend=0.0,
                   instantiate=time.perf_counter() - t0)
    return jitted._lower(key, None, None, (closed, static, out_tree, timings, keys))


def is_symbolic_call(key: Key) -> bool:
    return any(dims.symbolic_shape(s) for s, _, _ in key[1])


class SymbolicLowered:
    """`Jitted.lower` at symbolic shapes: the traced symbolic IR (`.graph`, `.as_text()`),
    `.instantiate(**sizes)` (the backend's Lowered at one size) and `.compile()`."""

    def __init__(self, jitted: Jitted, key: Key, traced: Traced) -> None:
        self._jitted, self._key, self._traced = jitted, key, traced
        self.graph: Graph
        self.jaxpr, self.graph = traced[0], traced[1]
        self.specs = [s for s, _, _ in key[1]]
        self.symbols = sorted(dims.symbols(d for s in self.specs for d in s))
        self.constraints = dims.constraints(self.specs)

    def as_text(self, level: str = "traced") -> str:
        if level != "traced":
            raise BadArgumentError(
                f"as_text({level!r}) of a symbolic lowering: only the traced IR ('traced') is "
                f"symbolic; instantiate(**sizes) gives the backend's program at one size")
        return self.graph.as_text()

    def bind(self, shapes: Sequence[Sequence[int]], labels: Sequence[str] | None = None
             ) -> dict[str, int]:
        """The sizes of one call's argument shapes (ShapeConstraintError when they do not
        fit the symbolic shapes or their constraints)."""
        labels = labels or [f"argument leaf {i}" for i in range(len(shapes))]
        env: dict[str, int] = bind(self.specs, shapes, labels, self.constraints)
        return env

    def instantiate(self, **sizes: int) -> Lowered:
        """The backend's Lowered at concrete sizes of every symbol (by name)."""
        missing = set(self.symbols) - set(sizes)
        if missing:
            raise BadArgumentError(f"instantiate: give a size for {sorted(missing)}")
        shapes = [tuple(dims.evaluate(d, sizes) for d in s) for s in self.specs]
        env = self.bind(shapes)
        tree, sigs, statics, context = self._key
        key = (tree, tuple((shape, d, w) for shape, (_, d, w) in zip(shapes, sigs)), statics,
               context)
        return lowered_from(self._jitted, key, self._traced, env)

    def compile(self) -> "SymbolicCompiled":
        return SymbolicCompiled(self)

    def placed(self) -> Lowered:
        """The backend's Lowered of the symbolic graph itself (no size fixed): what a backend
        that keeps dimensions symbolic in its program lowers (export_coreml's flexible
        inputs). An op whose lowering needs a size is placed on the host with its reason."""
        jitted = self._jitted
        closed, graph, out_tree, timings, keys = self._traced
        return jitted._lower(self._key, None, None, (closed, graph, out_tree, dict(timings),
                                                     keys))


class SymbolicCompiled:
    """A callable of a SymbolicLowered: each call's sizes bound and checked, each size's
    program compiled once."""

    def __init__(self, lowered: SymbolicLowered) -> None:
        self.lowered = lowered
        self._by_size: dict[tuple[tuple[str, int], ...], Compiled] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        if tree != self.lowered._key[0]:
            raise BadArgumentError(f"compiled for inputs {self.lowered._key[0]}, called "
                                   f"with {tree}")
        shapes = [tuple(getattr(x, "shape", ())) for x in leaves]
        env = self.lowered.bind(shapes)
        sizes = tuple(sorted(env.items()))
        compiled = self._by_size.get(sizes)
        if compiled is None:
            compiled = self._by_size[sizes] = self.lowered.instantiate(**env).compile()
        return compiled.call_flat(leaves)


def _user_line(exc: BaseException) -> str:
    """' (file.py:line)' of the innermost user frame of `exc`'s traceback, or ''."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not path.startswith((_PKG, _JAX)) and "site-packages" not in path:
            found = f" ({os.path.basename(path)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return found or ""


__all__ = ["Polymorphic", "SymbolicLowered", "SymbolicCompiled", "ShapeConstraintError",
           "SymbolicShapeError", "RlxError"]
