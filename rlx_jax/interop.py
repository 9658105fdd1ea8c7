"""`rlx_call`: an rlx_jax.jit function called on JAX tracers, as one JAX primitive.

Outside an rlx_jax trace, `f(*args)` on tracers of `jax.grad`, `jax.vmap`, `jax.jit`, ... binds
`rlx_call` on the flat array leaves of the dynamic arguments (static arguments and the pytree
structure are part of the call's `RlxFunction`; typed PRNG keys cross as their uint32 data). Every
rule of the primitive compiles a JAX transformation of the plain function with rlx_jax, on the
same backend with the same options, so nothing runs as plain JAX instead of the backend:

- abstract evaluation: `jax.eval_shape` of the function (cached per input avals);
- evaluation: the rlx_jax executable for the inputs' avals;
- JVP: the primal `rlx_call` and one `rlx_call` of the tangent map
  `lambda p, t: jax.jvp(fun, p, t)[1]` (only the non-zero float tangents cross; only float
  outputs have tangents), linear in its tangent inputs;
- transpose (of such a linear call): an `rlx_call` of `jax.linear_transpose` of the linear map,
  its non-linear inputs held fixed; it is not linear in those, so it is differentiated again by
  the JVP rule: jax.grad of jax.grad, jax.hessian and jax.jacfwd of jax.jacrev all work;
- linearization for reverse mode (jax.grad, jax.vjp, jacrev): the primal `rlx_call` and a
  tangent `rlx_call` whose transpose is an `rlx_call` of `jax.vjp` of the function, so a
  function JAX differentiates in reverse only (a custom_vjp under jax_custom_vjp3) has
  gradients; forward mode (jax.jvp, jax.linearize, jacfwd) uses the JVP rule;
- batching: an `rlx_call` of `jax.vmap(fun, in_axes, out_axes=0)`;
- lowering under `jax.jit`: a host callback (as `jax.pure_callback` lowers) that runs the
  executable, compiled when `jax.jit` lowers; the rest of the jax.jit program stays XLA;
- printing: a jaxpr shows the call as `rlx_call[fn=<name>@<backend> jaxpr={ ... }]`, the
  function's own jaxpr nested as JAX prints a `jit` call's.

Gradients recompute the forward where the backward needs it (the tangent map is compiled from
`jax.jvp` of the whole function): a `jax.grad` runs the forward once and the transposed map once.
`RlxFunction.calls` counts the executions of each function's executables.
"""
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import jax_internals, nesting
from .arguments import FlatFun
from .errors import BadArgumentError
from .ir import prng

rlx_call_p = Primitive("rlx_call")
rlx_call_p.multiple_results = True

_OPERANDS = (bool, int, float, complex, np.ndarray, np.generic, jax.Array)   # bind as they are
Avals = tuple[Any, ...]            # the inputs' abstract values (jax.typeof)
Bools = tuple[bool, ...]
Flat = Callable[..., Any]          # a function of flat leaves, returning a list of leaves
Build = Callable[[], tuple[Flat, str, Iterable[int]]]     # (flat, name, linear positions)


def _struct(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _is_float(dtype: Any) -> bool:
    return bool(jax.numpy.issubdtype(dtype, jax.numpy.inexact))


class RlxFunction:
    """A function of flat array leaves (plain JAX), run through rlx_jax on one backend.

    `flat(*leaves) -> list of leaves`; `linear`: the input positions it is linear in (a tangent
    or cotangent map), empty for the user's function. `make_jitted(flat)` gives the rlx_jax.jit
    object that compiles it (same backend and options as the user's function); `output` picks
    the kind of results ("jax" for evaluation, "numpy" inside a host callback)."""

    def __init__(self, flat: Flat, name: str, make_jitted: Callable[[Flat, str], Any],
                 linear: Iterable[int] = frozenset()) -> None:
        self.flat, self.name, self.linear = flat, name, frozenset(linear)
        flat.__name__ = name
        self._make_jitted = make_jitted
        self._jitted: dict[str, Any] = {}
        self._compiled: dict[tuple[Avals, str], Any] = {}
        self._avals: dict[Avals, Any] = {}
        self._derived: dict[tuple[Any, ...], RlxFunction] = {}
        self._lock = threading.Lock()
        self.calls = 0
        # (function, nonzero, float_out): see jvp_map(reverse=True)
        self.transposed_by: tuple[RlxFunction, Bools, Bools] | None = None

    def __repr__(self) -> str:
        return f"{self.name}@{self.backend}"

    @property
    def backend(self) -> str:
        return str(self.jitted("jax").backend_name)

    def jitted(self, output: str) -> Any:
        j = self._jitted.get(output)
        if j is None:
            j = self._jitted[output] = self._make_jitted(self.flat, output)
        return j

    def out_avals(self, avals: Avals) -> Avals:
        if self.transposed_by is not None:     # a reverse tangent map: the tangents' types
            src, nonzero, float_out = self.transposed_by
            outs = src.out_avals(avals[:len(nonzero)])
            return tuple(a.to_tangent_aval() for a, f in zip(outs, float_out) if f)
        return tuple(v.aval for v in self.jaxpr(avals).jaxpr.outvars)

    def jaxpr(self, avals: Avals) -> Any:
        """The ClosedJaxpr of the function for inputs of `avals` (its result types, printing,
        closure conversion), traced once; nested rlx_jax.jit functions are inlined."""
        out = self._avals.get(avals)
        if out is None:
            with nesting.tracing():
                out = self._avals[avals] = jax.make_jaxpr(self.flat)(*map(_struct, avals))
        return out

    def hoisting(self, avals: Avals) -> tuple["RlxFunction", list[Any]] | None:
        """(the function with the values it closes over that an outer JAX transformation traces
        as extra trailing inputs, those values), or None when it closes over none: a compiled
        program cannot hold a tracer, so they are passed in, as `jax.closure_convert` does."""
        closed = self.jaxpr(avals)
        hoisted = tuple(i for i, c in enumerate(closed.consts) if nesting.is_tracer(c))
        if not hoisted:
            return None

        def build() -> tuple[Flat, str, Iterable[int]]:
            jaxpr, n = closed.jaxpr, len(avals)
            fixed = [None if i in hoisted else c for i, c in enumerate(closed.consts)]

            def converted(*xs: Any) -> Any:
                given = iter(xs[n:])
                consts = [next(given) if c is None else c for c in fixed]
                return jax.core.eval_jaxpr(jaxpr, consts, *xs[:n])
            return converted, self.name, self.linear
        fn = self.derive(("closure", avals, hoisted, id(closed)), build)
        return fn, [closed.consts[i] for i in hoisted]

    def compiled(self, avals: Avals, output: str) -> Any:
        """The rlx_jax Compiled for inputs of `avals`, made once."""
        key = (avals, output)
        c = self._compiled.get(key)
        if c is None:
            with self._lock:
                c = self._compiled.get(key)
                if c is None:
                    c = self.jitted(output).lower(*map(_struct, avals)).compile()
                    self._compiled[key] = c
        return c

    def run(self, args: Sequence[Any], output: str = "jax") -> Any:
        avals = tuple(jax.typeof(a) for a in args)
        outs = self.compiled(avals, output).call_flat(list(args))
        self.calls += 1
        return outs

    def derive(self, key: tuple[Any, ...], build: Build) -> "RlxFunction":
        d = self._derived.get(key)
        if d is None:
            flat, name, linear = build()
            d = self._derived[key] = RlxFunction(flat, name, self._make_jitted, linear)
        return d

    # ---- the transformations ----
    def jvp_map(self, nonzero: Bools, float_out: Bools, reverse: bool = False) -> "RlxFunction":
        """(primals, non-zero tangents) -> tangents of the float outputs. With `reverse` (JAX's
        linearization for a VJP), the map is transposed from `jax.vjp` of the function rather
        than from this JVP, which a function JAX differentiates in reverse only (a custom_vjp
        under jax_custom_vjp3) does not have."""
        d = self.derive(("jvp", nonzero, float_out, reverse),
                        lambda: self._jvp_build(nonzero, float_out))
        if reverse:
            d.transposed_by = (self, nonzero, float_out)
        return d

    def _vjp_transposed(self, nonzero: Bools, float_out: Bools, undefined: Bools) -> Flat:
        """(primals, cotangents of the float outputs) -> cotangents of the tangent inputs that
        are `undefined`, by jax.vjp of the function in its moving inputs."""
        n = len(nonzero)
        moving = [i for i, nz in enumerate(nonzero) if nz]
        if any(undefined[:n]):
            raise BadArgumentError(f"rlx_call {self!r}: cannot transpose with respect to its "
                                   f"primal inputs")

        def transposed(*xs: Any) -> list[Any]:
            primals, cts = xs[:n], list(xs[n:])

            def of_moving(*ps: Any) -> list[Any]:
                full = list(primals)
                for i, p in zip(moving, ps):
                    full[i] = p
                return [o for o, f in zip(self.flat(*full), float_out) if f]
            _, pull = jax.vjp(of_moving, *[primals[i] for i in moving])
            return [c for c, u in zip(pull(cts), undefined[n:]) if u]
        return transposed

    def _jvp_build(self, nonzero: Bools, float_out: Bools) -> tuple[Flat, str, Iterable[int]]:
        n = len(nonzero)
        moving = [i for i, nz in enumerate(nonzero) if nz]

        def tangent_map(*xs: Any) -> list[Any]:
            primals, tangents = xs[:n], xs[n:]

            def of_moving(*ps: Any) -> Any:   # inputs with a zero tangent stay constants: JAX sees
                full = list(primals)   # them unperturbed (custom_vjp's symbolic zeros)
                for i, p in zip(moving, ps):
                    full[i] = p
                return self.flat(*full)
            _, touts = jax.jvp(of_moving, [primals[i] for i in moving], list(tangents))
            return [t for t, f in zip(touts, float_out) if f]
        return tangent_map, f"{self.name}_jvp", range(n, n + sum(nonzero))

    def transpose_map(self, undefined: Bools, lin_avals: Avals, n_cts: int) -> "RlxFunction":
        """(defined inputs, output cotangents) -> cotangents of the undefined (linear) inputs;
        linear inputs that are defined contribute nothing to a cotangent and are held at zero."""
        def build() -> tuple[Flat, str, Iterable[int]]:
            n_def = len(undefined) - sum(undefined)
            if self.transposed_by is not None:
                src, nonzero, float_out = self.transposed_by
                return (src._vjp_transposed(nonzero, float_out, undefined),
                        f"{self.name}_transpose", range(n_def, n_def + n_cts))

            def transposed(*xs: Any) -> list[Any]:
                defined, cts = xs[:n_def], list(xs[n_def:])

                def linear_part(*unknown: Any) -> Any:
                    it_d, it_u = iter(defined), iter(unknown)
                    full = [next(it_u) if u else next(it_d) for u in undefined]
                    full = [jax.numpy.zeros_like(x) if i in self.linear and not u else x
                            for i, (x, u) in enumerate(zip(full, undefined))]
                    return self.flat(*full)
                return list(jax.linear_transpose(linear_part, *map(_struct, lin_avals))(cts))
            return transposed, f"{self.name}_transpose", range(n_def, n_def + n_cts)
        return self.derive(("transpose", undefined, lin_avals, n_cts), build)

    def vmap_map(self, dims: Sequence[Any], size: int, axis_name: Any = None) -> "RlxFunction":
        """The function vmapped over `dims` (None: unmapped), results batched along axis 0;
        `axis_name`: the outer vmap's, so that collectives over it (lax.axis_index, psum)
        inside the function are batched with it."""
        def build() -> tuple[Flat, str, Iterable[int]]:
            batched = jax.vmap(self.flat, in_axes=list(dims), out_axes=0, axis_size=size,
                               axis_name=axis_name)
            return ((lambda *xs: list(batched(*xs))), f"{self.name}_vmap",
                    self.linear)
        return self.derive(("vmap", dims, size, axis_name), build)


# ---- the primitive's rules ----

def _abstract_eval(*avals: Any, fn: RlxFunction) -> Avals:
    return fn.out_avals(tuple(avals))


def _impl(*args: Any, fn: RlxFunction) -> Any:
    return fn.run(args)


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], *, fn: RlxFunction) -> Any:
    outs = rlx_call_p.bind(*primals, fn=fn)
    out_avals = fn.out_avals(tuple(jax.typeof(p) for p in primals))
    nonzero = tuple(type(t) is not ad.Zero and getattr(t, "dtype", None) != jax.dtypes.float0
                    for t in tangents)
    float_out = tuple(_is_float(a.dtype) for a in out_avals)
    zeros = [ad.Zero(a.to_tangent_aval()) for a in out_avals]
    if not any(nonzero) or not any(float_out):
        return outs, zeros
    tmap = fn.jvp_map(nonzero, float_out)
    touts = iter(rlx_call_p.bind(*primals, *(t for t, nz in zip(tangents, nonzero) if nz),
                                 fn=tmap))
    return outs, [next(touts) if f else z for f, z in zip(float_out, zeros)]


def _linearize(is_vjp: bool, nonzero: Sequence[bool], *primals: Any, fn: RlxFunction) -> Any:
    """JAX's linearization (the path jax.vjp and jax.grad take): the primal call, and a tangent
    call whose transpose is built from jax.vjp of the function; forward mode (is_vjp False)
    goes through the JVP rule, as JAX's fallback does."""
    if not is_vjp:
        return _AD.fallback_linearize_rule(rlx_call_p, is_vjp, nonzero, *primals, fn=fn)
    outs = rlx_call_p.bind(*primals, fn=fn)
    out_avals = fn.out_avals(tuple(jax.typeof(p) for p in primals))
    nonzero = tuple(bool(nz) and jax.typeof(p).dtype != jax.dtypes.float0
                    for nz, p in zip(nonzero, primals))
    float_out = tuple(_is_float(a.dtype) for a in out_avals)
    nz_out = [f and any(nonzero) for f in float_out]

    def tangent_fun(residuals: Sequence[Any], *tangents: Any) -> list[Any]:
        zeros = [ad.Zero(a.to_tangent_aval()) for a in out_avals]
        if not any(nz_out):
            return zeros
        moving = [ad.instantiate_zeros(t) for t, nz in zip(tangents, nonzero) if nz]
        touts = iter(rlx_call_p.bind(*residuals, *moving,
                                     fn=fn.jvp_map(nonzero, float_out, reverse=True)))
        return [next(touts) if f else z for f, z in zip(float_out, zeros)]
    return outs, nz_out, list(primals), tangent_fun


def _transpose(cts: Sequence[Any], *args: Any, fn: RlxFunction) -> list[Any]:
    undefined = tuple(ad.is_undefined_primal(a) for a in args)
    bad = [i for i, u in enumerate(undefined) if u and i not in fn.linear]
    if bad:
        raise BadArgumentError(f"rlx_call {fn!r}: cannot transpose with respect to its "
                               f"non-linear inputs {bad}")
    lin_avals = tuple(a.aval for a in args if ad.is_undefined_primal(a))
    cts = [ad.instantiate_zeros(c) for c in cts]
    tfn = fn.transpose_map(undefined, lin_avals, len(cts))
    res = iter(rlx_call_p.bind(*(a for a in args if not ad.is_undefined_primal(a)), *cts, fn=tfn))
    return [next(res) if u else None for u in undefined]


def _uses_axis(fn: RlxFunction, args: Sequence[Any], name: Any) -> bool:
    effects = fn.jaxpr(tuple(jax.typeof(a) for a in args)).effects
    return any(type(e).__name__ == "NamedAxisEffect" and e.name == name for e in effects)


def _batch(axis_data: Any, args: Sequence[Any], dims: Sequence[Any], *, fn: RlxFunction) -> Any:
    if all(d is None for d in dims) and not _uses_axis(fn, args, axis_data.name):
        return rlx_call_p.bind(*args, fn=fn), [None] * len(fn.out_avals(    # not batched
            tuple(jax.typeof(a) for a in args)))
    vfn = fn.vmap_map(tuple(dims), axis_data.size, axis_data.name)
    outs = rlx_call_p.bind(*args, fn=vfn)
    return outs, [0] * len(outs)


_CORE = jax_internals.module("core")
_AD = jax_internals.module("ad")


def _pretty(eqn: Any, context: Any, settings: Any) -> Any:
    """An rlx_call eqn printed with the function's jaxpr nested (as JAX prints `jit`)."""
    fn = eqn.params["fn"]
    jaxpr = fn.jaxpr(tuple(v.aval for v in eqn.invars))
    return _CORE._pp_eqn(eqn.replace(params=dict(eqn.params, jaxpr=jaxpr)), context, settings,
                         params=["fn", "jaxpr"])


def _lowering(ctx: Any, *operands: Any, fn: RlxFunction) -> Any:
    compiled = fn.compiled(tuple(ctx.avals_in), "numpy")

    def callback(*xs: Any) -> tuple[np.ndarray, ...]:
        outs = compiled.call_flat(list(xs))
        fn.calls += 1
        return tuple(np.asarray(o) for o in outs)

    results, _, _ = mlir.emit_python_callback(
        ctx, callback, None, list(operands), ctx.avals_in, ctx.avals_out,
        has_side_effect=False, returns_token=False)
    return results


rlx_call_p.def_impl(_impl)
rlx_call_p.def_abstract_eval(_abstract_eval)
ad.primitive_jvps[rlx_call_p] = _jvp
ad.primitive_transposes[rlx_call_p] = _transpose
_AD.primitive_linearizations[rlx_call_p] = _linearize
batching.fancy_primitive_batchers[rlx_call_p] = _batch    # with the vmap's axis name
mlir.register_lowering(rlx_call_p, _lowering, cacheable=False)
_CORE.pp_eqn_rules[rlx_call_p] = _pretty


# ---- binding a Jitted call ----

def _as_operand(x: Any) -> Any:
    return x if isinstance(x, _OPERANDS) or nesting.is_tracer(x) else np.asarray(x)


def _key_data(x: Any, path: str) -> tuple[Any, Any]:
    dtype = getattr(x, "dtype", None)
    if dtype is None or not prng.is_key(dtype):
        return x, None
    return prng.unwrap(x), prng.dtype_of(dtype)


def bind(jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`jitted(*args, **kwargs)` on JAX tracers: one rlx_call of its flat function."""
    statics, flat_fun, in_leaves = jitted.flat_call(args, kwargs)
    leaves: Sequence[Any]
    leaves, keys = zip(*(_key_data(x, f"#{i}") for i, x in enumerate(in_leaves))) \
        if in_leaves else ((), ())
    leaves = [_as_operand(x) for x in leaves]
    avals = tuple(jax.typeof(x) for x in leaves)
    fn, out_info = jitted.rlx_function((flat_fun.tree, statics, keys, avals),
                                       lambda: _base(jitted, flat_fun, keys))
    closure = fn.hoisting(avals)
    if closure is not None:            # it closes over tracers: they become inputs
        fn, hoisted = closure
        leaves = list(leaves) + hoisted
    outs = rlx_call_p.bind(*leaves, fn=fn)
    out_tree, out_keys = out_info
    outs = [o if k is None else prng.wrap(o, k) for o, k in zip(outs, out_keys)]
    return jax.tree_util.tree_unflatten(out_tree, outs)


def _base(jitted: Any, flat_fun: FlatFun, keys: Sequence[Any]) -> tuple[RlxFunction, list[Any]]:
    out_info: list[Any] = []

    def flat(*leaves: Any) -> list[Any]:
        outs = flat_fun(*(x if k is None else prng.wrap(x, k) for x, k in zip(leaves, keys)))
        if not out_info:
            out_info.extend((flat_fun.out_trees[-1], [prng.dtype_of(o.dtype) if prng.is_key(
                o.dtype) else None for o in outs]))
        return [prng.unwrap(o) if prng.is_key(o.dtype) else o for o in outs]
    return RlxFunction(flat, jitted.__name__, jitted.like), out_info
