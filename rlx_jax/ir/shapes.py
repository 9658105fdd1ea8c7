"""Shape and dtype inference per OpKind.

The reference lowering (backends/xla/rules.py) defines each primitive kind's semantics once, as
jax.lax code; inference evaluates that rule abstractly (jax.eval_shape), so shapes can never
disagree with semantics. High-level kinds without a reference rule register a SHAPE_RULES entry.
"""
import jax
import numpy as np

from ..errors import IRTypeError

SHAPE_RULES = {}


def shape_rule(*kinds):
    def register(fn):
        for k in kinds:
            if k in SHAPE_RULES:
                raise KeyError(f"duplicate shape rule for {k}")
            SHAPE_RULES[k] = fn
        return fn
    return register


def infer(node):
    """Returns [(shape, dtype), ...] for `node` (whose outputs are not yet set)."""
    if node.kind in SHAPE_RULES:
        return SHAPE_RULES[node.kind](node, *node.inputs)
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
    return [(o.shape, np.dtype(o.dtype)) for o in outs]
