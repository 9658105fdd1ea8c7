"""Shape and dtype inference per OpKind: the reference semantics (ir/reference.py), evaluated
abstractly with jax.eval_shape, so a node's type can never disagree with what it means."""
import jax

from ..errors import IRTypeError
from .prng import dtype_of, jax_dtype
from .reference import REFERENCE, apply

_CACHE = {}
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

    Results are memoised per (kind, attrs, operand types): programs repeat the same layers."""
    key = _key(node)
    hit = _CACHE.get(key) if key is not None else None
    if hit is None:
        hit = _infer(node)
        if key is not None and len(_CACHE) < _CACHE_MAX:
            _CACHE[key] = hit
    return list(hit)


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
