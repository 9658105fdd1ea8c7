"""rlx_jax.nn primitives -> their high-level and backward OpKinds (docs/high-level-kinds.md).

The linear `*_jvp` primitives only survive in forward-mode programs (jax.jvp, jacfwd); they are
inlined as their reference implementation. Shape rules for the high-level and backward kinds
evaluate the kinds' reference semantics (rlx_jax.nn.kinds.KIND_REFS) abstractly.
"""
import functools

import jax
import numpy as np

from ...errors import IRTypeError
from ...ir.shapes import shape_rule
from ...nn._prim import PRIMITIVES
from ...nn.kinds import KIND_REFS, PRIM_KINDS
from . import jaxpr_rule


def _kind_rule(kind, attrs):
    def rule(ctx, *operands, **params):
        return ctx.emit(kind, operands, **attrs(params, operands))
    return rule


def _inline_rule(prim):
    """Translates the primitive's reference implementation in place of the eqn."""
    def rule(ctx, *operands, **params):
        from ..trace import _Tracer
        structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in operands]
        closed = jax.make_jaxpr(functools.partial(prim.impl, **params))(*structs)
        t = _Tracer()
        t.b = ctx.b
        outs = t.run(closed.jaxpr, closed.consts, list(operands))
        t.raise_missing()
        return outs
    return rule


for _name, _prim in PRIMITIVES.items():
    if _name in PRIM_KINDS:
        jaxpr_rule(_name)(_kind_rule(*PRIM_KINDS[_name]))
    else:
        jaxpr_rule(_name)(_inline_rule(_prim))


_SHAPES = {}


def _ref_shape(node, *inputs):
    """Output types of a high-level/backward node: its reference semantics, evaluated abstractly
    (memoised per kind, attributes and operand types)."""
    key = (node.kind, tuple(node.attrs.items()), tuple((v.shape, v.dtype) for v in inputs),
           jax.config.jax_enable_x64)
    if key not in _SHAPES:
        structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in inputs]
        try:
            out = jax.eval_shape(functools.partial(KIND_REFS[node.kind], **node.attrs), *structs)
        except Exception as e:  # noqa: BLE001 - reported as a typed IR error
            ins = ", ".join(v.type_str() for v in inputs)
            raise IRTypeError(f"ill-typed {node.kind.name}{node.attr_text()} on ({ins}): "
                              f"{type(e).__name__}: {e}") from None
        outs = out if isinstance(out, (tuple, list)) else (out,)
        _SHAPES[key] = [(o.shape, np.dtype(o.dtype)) for o in outs]
    return list(_SHAPES[key])


shape_rule(*KIND_REFS)(_ref_shape)
