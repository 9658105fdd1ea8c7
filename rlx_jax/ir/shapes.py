"""Shape and dtype inference per OpKind: the reference semantics (ir/reference.py), evaluated
abstractly with jax.eval_shape, so a node's type can never disagree with what it means.

Results are memoised per signature (kind, attributes, operand types, x64) in the process, and
on disk for later processes (passes/template_cache.py, area "types", under a digest of rlx_jax's
sources and the jax and numpy versions) when the signature is plain data: None, bools, ints,
strings, floats other than NaN, enum members (OpKind, lax's modes), numpy dtypes without
fields (not PRNG key dtypes, whose meaning is this process's registry), and tuples of them:
its repr then says all of it.
"""
import enum
from typing import Any

import jax
import numpy as np

from ..errors import IRTypeError
from .prng import dtype_of, jax_dtype
from .reference import REFERENCE, apply

_CACHE: dict[Any, Any] = {}
_CACHE_MAX = 65536


def _key(node):
    """(kind, attrs, operand types), or None when an attribute is unhashable or the node has
    regions (their contents are part of its type)."""
    if node.regions:
        return None
    try:
        key = (node.kind, tuple(node.attrs.items()),
               tuple((v.shape, v.dtype) for v in node.inputs), jax.config.jax_enable_x64)
        hash(key)
        return key
    except TypeError:
        return None


def infer(node):
    """Returns [(shape, dtype), ...] for `node` (its outputs need not be set).

    Results are memoised per (kind, attrs, operand types): programs repeat the same layers;
    and kept on disk for the next process (see the module doc)."""
    key = _key(node)
    hit = _CACHE.get(key) if key is not None else None
    if hit is None:
        stored = key is not None and node.kind in REFERENCE and _plain(key)
        hit = _load(key) if stored else None
        if hit is None:
            hit = _infer(node)
            if stored and _plain(hit):
                _store(key, hit)
        if key is not None and len(_CACHE) < _CACHE_MAX:
            _CACHE[key] = hit
    return list(hit)


def _plain(x):
    """Whether `x` is plain data, which its repr describes whole (see the module doc)."""
    if isinstance(x, tuple):
        return all(_plain(i) for i in x)
    if isinstance(x, float):
        return x == x
    if isinstance(x, np.dtype):
        return x.fields is None
    return x is None or isinstance(x, (bool, int, str, enum.Enum))


def _load(key):
    """The types an earlier process inferred for `key`, or None."""
    from ..passes import template_cache
    got = template_cache.load(key, "types")
    return None if got is template_cache.MISSING else got


def _store(key, types):
    from ..passes import template_cache
    template_cache.store(key, types, "types")


def _infer(node):
    if node.kind not in REFERENCE:
        raise IRTypeError(f"no reference semantics (ir/reference.py) for {node.kind.name}")
    structs = [jax.ShapeDtypeStruct(v.shape, jax_dtype(v.dtype)) for v in node.inputs]
    try:
        out = jax.eval_shape(lambda *a: apply(node, a), *structs)
    except Exception as e:  # noqa: BLE001 - turned into a typed IR error
        ins = ", ".join(v.type_str() for v in node.inputs)
        raise IRTypeError(f"ill-typed {node.kind.name}{node.attr_text()} on ({ins}): "
                          f"{type(e).__name__}: {e}") from None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple((tuple(o.shape), dtype_of(o.dtype)) for o in outs)
