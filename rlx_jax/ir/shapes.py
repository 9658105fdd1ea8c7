"""Shape and dtype inference per OpKind.

The reference lowering (backends/xla/rules.py) defines each primitive kind's semantics once, as
jax.lax code; inference evaluates that rule abstractly (jax.eval_shape), so shapes can never
disagree with semantics. High-level kinds without a reference rule register a SHAPE_RULES entry.
"""
import jax
import numpy as np

from ..errors import IRTypeError
from .interpret import rule_table

SHAPE_RULES, shape_rule = rule_table("SHAPE_RULES")


_CACHE = {}
_CACHE_MAX = 65536


def _key(node):
    """(kind, attrs, operand types), or None when an attribute is unhashable."""
    try:
        key = (node.kind, tuple(node.attrs.items()),
               tuple((v.shape, v.dtype) for v in node.inputs), jax.config.jax_enable_x64)
        hash(key)
        return key
    except TypeError:
        return None


def infer(node):
    """Returns [(shape, dtype), ...] for `node` (whose outputs are not yet set).

    Results are memoised per (kind, attrs, operand types): programs repeat the same layers."""
    if node.kind in SHAPE_RULES:
        return SHAPE_RULES[node.kind](node, *node.inputs)
    key = _key(node)
    hit = _CACHE.get(key) if key is not None else None
    if hit is None:
        hit = _infer_reference(node)
        if key is not None and len(_CACHE) < _CACHE_MAX:
            _CACHE[key] = hit
    return list(hit)


def _infer_reference(node):
    from ..backends.xla.rules import XLA_RULES
    rule = XLA_RULES.get(node.kind)
    if rule is None:
        raise IRTypeError(f"no shape rule for {node.kind.name}")
    structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in node.inputs]
    try:
        out = jax.eval_shape(lambda *a: rule(None, node, *a), *structs)
    except Exception as e:  # noqa: BLE001 - turned into a typed IR error
        ins = ", ".join(v.type_str() for v in node.inputs)
        raise IRTypeError(
            f"ill-typed {node.kind.name}{node.attr_text()} on ({ins}): {e}") from None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple((tuple(o.shape), np.dtype(o.dtype)) for o in outs)
