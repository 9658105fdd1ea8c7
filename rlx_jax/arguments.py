"""Arguments and results of a jitted function: leaf signatures (shape, dtype, weak type) JAX's
way, the names of the function and of its input and output leaves after their pytree paths,
typed PRNG keys at the boundary (KeyBoundary), results' weak types (with_weak_types), and the
errors for arguments that cannot be taken (tracers, keys of an unsupported implementation,
unhashable static values)."""
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import jax
import numpy as np

from . import jax_internals
from .errors import BadArgumentError


class MaskedArgumentError(BadArgumentError, ValueError):
    """A numpy masked array passed as an argument (a ValueError, as jax.jit raises)."""
from .ir import prng

_SCALAR_TYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int32), float: np.dtype(np.float32),
                 complex: np.dtype(np.complex64)}
_SCALAR_TYPES_X64 = {bool: np.dtype(np.bool_), int: np.dtype(np.int64),
                     float: np.dtype(np.float64), complex: np.dtype(np.complex128)}
_NARROW = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32),
           np.dtype(np.uint64): np.dtype(np.uint32),
           np.dtype(np.complex128): np.dtype(np.complex64)}
# dtype object of any array library -> numpy dtype (memoised: hot path)
_DTYPES: dict[Any, np.dtype[Any]] = {}


def _backend_dtype(dtype):
    """The numpy dtype of a backend's own dtype object (Backend.numpy_dtype), else None."""
    from .backends.base import all_backends
    for backend in all_backends().values():
        out = backend.numpy_dtype(dtype)
        if out is not None:
            return out
    return None


def numpy_dtype(dtype):
    """The numpy dtype of a dtype object of any array library (jax, numpy, a backend's, typed
    PRNG keys as their IR dtypes); BadArgumentError for others."""
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):
        pass
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = _backend_dtype(dtype)              # e.g. an mx.Dtype
        if out is None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            out = prng.dtype_of(dtype)           # a typed key, of its implementation
        if out is None:
            raise BadArgumentError(f"dtype {dtype} is not an array dtype rlx_jax knows; pass "
                                   f"float/int/uint/bool arrays") from None
    try:
        _DTYPES[dtype] = out
    except TypeError:
        pass
    return out


_INT_LIMIT = {False: 2 ** 31, True: 2 ** 63}    # a Python int argument's range, as jax.jit's


def leaf_signature(x, path, x64=False):
    """(shape, dtype, weak_type) of one argument leaf, JAX's way."""
    t = type(x)
    if t in _SCALAR_TYPES:
        if t is int and not -_INT_LIMIT[x64] <= x < _INT_LIMIT[x64]:
            raise OverflowError(f"An overflow was encountered while parsing argument {path}: "
                                f"Python int {x} is outside {'int64' if x64 else 'int32'}'s "
                                f"range (jax.jit raises the same); pass a numpy array of a "
                                f"dtype that holds it")
        return ((), (_SCALAR_TYPES_X64 if x64 else _SCALAR_TYPES)[t], t is not bool)
    if isinstance(x, jax.core.Tracer):
        raise TracedArgument(x)
    if isinstance(x, np.ma.MaskedArray):        # refused as jax.jit refuses it
        raise MaskedArgumentError(
            f"argument {path} is a numpy masked array: numpy masked arrays are not supported "
            f"as direct inputs to JAX functions (jax.jit refuses them too); pass arr.filled() "
            f"or arr.data and the mask as arrays")
    aval = getattr(x, "aval", None)
    if isinstance(x, (int, float, complex)) and aval is not None:   # JAX's typed literals
        return ((), _NARROW.get(aval.dtype, aval.dtype) if not x64 else aval.dtype,
                bool(aval.weak_type))
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise BadArgumentError(
            f"argument {path} has type {t.__name__}, which is not an array or a number; "
            f"pass jax/numpy/mlx arrays or Python scalars, or mark it static "
            f"(static_argnums/static_argnames)")
    dtype = numpy_dtype(dtype)
    if not x64:
        dtype = _NARROW.get(dtype, dtype)
    return (tuple(shape), dtype, bool(getattr(x, "weak_type", False)))


def narrowed(dtype, x64):
    """`dtype` as JAX keeps it: 64-bit types narrowed to 32 bits unless x64 is on."""
    return dtype if x64 else _NARROW.get(dtype, dtype)


def _array_signature(x, x64):
    d = x.dtype
    return (x.shape, d if x64 else _NARROW.get(d, d), x.weak_type)


def _numpy_signature(x, x64):
    d = x.dtype
    return (x.shape, d if x64 else _NARROW.get(d, d), False)


def _float_signature(x, x64):
    return ((), _SCALAR_TYPES_X64[float] if x64 else _SCALAR_TYPES[float], True)


# type -> (leaf, x64) -> signature (as leaf_signature gives it), for the leaf types every cached
# call meets (Jitted._key); a backend adds its own array type (MLX: mx.array). Any other type
# takes leaf_signature's general path, which also raises for bad leaves.
FAST_SIGNATURES: dict[type, Callable[[Any, bool], Any]] = {
    jax_internals.module("array").ArrayImpl: _array_signature, np.ndarray: _numpy_signature,
    float: _float_signature}

# Array types whose signature is a function of (type, shape, dtype) alone under one trace
# context (never weakly typed): a call whose arguments are all positional arrays of these
# types is checked against the previous call's by those three (Jitted's last-call memo)
# without a pytree flatten; a backend adds its own (MLX: mx.array).
PLAIN_ARRAY_TYPES: set[type] = {np.ndarray}


def static_args(sig, static_argnums, static_argnames):
    """(positions, names) of the static arguments, as frozensets: each named also by the other
    where `sig` (the function's inspect.Signature, or None) tells; None means none, as in
    jax.jit."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums or ())
    names = (static_argnames,) if isinstance(static_argnames, str) \
        else tuple(static_argnames or ())
    params = list(sig.parameters) if sig else []
    nums = set(nums) | {params.index(n) for n in names if n in params}
    names = set(names) | {params[i] for i in nums if 0 <= i < len(params)}
    return frozenset(nums), frozenset(names)


def function_name(fun):
    """The name a jitted function goes by: its __name__, `partial(<name>)`, or its type's."""
    name = getattr(fun, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fun, functools.partial):
        return f"partial({function_name(fun.func)})"
    return type(fun).__name__


def _key_name(k):
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_names(params, dyn_positions, dyn_args, dyn_kwargs):
    """One name per dynamic argument leaf after its pytree path: `params_w1`, `x`, `scale`."""
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]:
        top, key, rest = path[0], path[1], path[2:]
        if _key_name(top) == "0":
            i = dyn_positions[int(_key_name(key))]
            head = params[i] if i < len(params) else f"arg{i}"
        else:
            head = _key_name(key)
        names.append("_".join([head] + [_key_name(k) for k in rest]))
    return names


def output_names(out_tree):
    """One name per output leaf: `output` for a single array, else `output_<path>`."""
    n = out_tree.num_leaves
    leaves = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(out_tree, list(range(n))))[0]
    if n == 1 and not leaves[0][0]:
        return ["output"]
    return ["_".join(["output"] + [_key_name(k) for k in path]) for path, _ in leaves]


class TracedArgument(Exception):
    """An argument leaf is a JAX tracer (args[0]): the function is being transformed."""


def raise_unhashable(name, statics):
    """Raises the error for the first static argument that cannot be hashed."""
    for where, value in statics:
        try:
            hash(value)
        except TypeError as e:
            what = f"argument {where}" if isinstance(where, int) else f"argument '{where}'"
            text = repr(value)
            text = text if len(text) <= 60 else text[:57] + "..."
            hint = ("pass a tuple instead of a list" if isinstance(value, list) else
                    "pass it as a dynamic argument (leave it out of static_argnums/"
                    "static_argnames)" if hasattr(value, "shape") else
                    "give its class __hash__ and __eq__, or pass it as a dynamic argument")
            raise BadArgumentError(
                f"Non-hashable static arguments are not supported: static {what} of {name} is "
                f"an object of type {type(value).__name__} ({text}), and hashing it failed "
                f"with TypeError: {e}. Static arguments key the compile cache; {hint}") from None


class KeyBoundary:
    """Typed PRNG keys cross an executable's boundary as their uint32 data (frontend/trace.py
    boundary_input): `args` turns the key arguments at `key_args` (flat positions) into their
    data, `results` wraps the results at `key_results` back into typed keys, as jax.jit
    returns them (`key_results`: flat position -> IR key dtype). One place for every backend,
    built only when the program has keys."""

    def __init__(self, key_args, key_results):
        self.key_args, self.key_results = frozenset(key_args), dict(key_results)

    def args(self, leaves):
        return [prng.unwrap(x) if i in self.key_args else x for i, x in enumerate(leaves)]

    def results(self, outs):
        kr = self.key_results
        return [prng.wrap(o, kr[i]) if i in kr else o for i, o in enumerate(outs)]


def key_boundary(closed_jaxpr):
    """The KeyBoundary of a traced function, or None when no argument or result is a key."""
    ins = [i for i, a in enumerate(closed_jaxpr.in_avals) if prng.is_key(a.dtype)]
    outs = {i: prng.dtype_of(a.dtype) for i, a in enumerate(closed_jaxpr.out_avals)
            if prng.is_key(a.dtype)}
    return KeyBoundary(ins, outs) if ins or outs else None


def weak_types(closed_jaxpr):
    """The weak type of each output of a traced function: jax.jit's results carry them."""
    return tuple(bool(getattr(a, "weak_type", False)) for a in closed_jaxpr.out_avals)


def out_specs(closed_jaxpr):
    """The PartitionSpec of each output when the function is traced under a mesh (jax.set_mesh:
    jax.jit's results are then NamedShardings of it, with the jaxpr's specs, replicated where
    an output has none), or () when there is no mesh. The trace context (the cache key) holds
    the mesh, so a call outside it uses another program."""
    get = getattr(jax.sharding, "get_abstract_mesh", None)
    if get is None or get().empty:
        return ()
    specs = []
    for a in closed_jaxpr.out_avals:
        sharding = getattr(a, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        specs.append(jax.sharding.PartitionSpec(*[None] * len(a.shape))
                     if mesh is None or mesh.empty else sharding.spec)
    return tuple(specs)


def with_weak_types(convert, weak):
    """`convert` (outs -> outs, or None) followed by giving each jax.Array result the weak type
    `weak` lists for it (weak_types: the jaxpr's). A backend's results have the jaxpr's dtypes
    but not always its weak types (the reference backend's follow its re-emitted program;
    MLX's and Core ML's converters give them at once): `jnp.full_like` of a weakly typed
    argument, a `cond` returning a Python scalar. `weak` empty (results other than
    jax.Arrays), or a converter that `gives_weak_types` itself: `convert`."""
    if not weak or getattr(convert, "gives_weak_types", False):
        return convert

    def run(outs):
        if convert is not None:
            outs = convert(outs)
        return [o if getattr(o, "weak_type", w) is w else _weakly_typed(o, w)
                for o, w in zip(outs, weak)]
    return run


def _weakly_typed(x, weak):
    """jax.Array `x` with weak type `weak`, the same buffers (JAX has no public way to set it;
    this is how jax.Array is built from its parts)."""
    impl = jax_internals.module("array").ArrayImpl
    return impl(x.aval.update(weak_type=weak), x.sharding, x._arrays, committed=x._committed,
                _skip_checks=True)


R_co = TypeVar("R_co", covariant=True)


class FlatCall(Protocol[R_co]):
    """A Compiled as a Jitted of a function with results `R_co` holds it."""
    def call_flat(self, leaves: Any) -> R_co: ...


class DirectCall(Protocol[R_co]):
    """A backend's direct call of a Jitted (Backend.direct_call)."""
    def usable(self) -> bool: ...

    def call(self, *args: Any, **kwargs: Any) -> R_co: ...


class FlatFun(Protocol):
    """flat_function's function of the dynamic leaves: `tree` the leaves' pytree,
    `out_trees` the result tree of each call."""
    tree: jax.tree_util.PyTreeDef
    out_trees: list[jax.tree_util.PyTreeDef]

    def __call__(self, *leaves: Any) -> list[Any]: ...


def flat_function(fun: Callable[..., Any], tree: jax.tree_util.PyTreeDef,
                  statics: tuple[Any, ...]) -> FlatFun:
    """The function of the dynamic leaves (pytree `tree`) of a call of `fun`, with `statics`
    put back; its `out_trees` collects the result tree of each call."""
    static_pos = dict(s for s in statics if isinstance(s[0], int))
    static_kw = {k: v for k, v in statics if isinstance(k, str)}

    def flat_fun(*leaves: Any) -> list[Any]:
        dyn_args, dyn_kwargs = jax.tree_util.tree_unflatten(tree, leaves)
        it = iter(dyn_args)
        n = len(dyn_args) + len(static_pos)
        full = [static_pos[i] if i in static_pos else next(it) for i in range(n)]
        outs, t = jax.tree_util.tree_flatten(fun(*full, **dyn_kwargs, **static_kw))
        out_trees.append(t)
        return outs
    out_trees: list[jax.tree_util.PyTreeDef] = []
    typed = cast(FlatFun, flat_fun)
    typed.tree, typed.out_trees = tree, out_trees
    return typed
