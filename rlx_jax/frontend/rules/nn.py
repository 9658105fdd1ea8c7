"""rlx_jax.nn primitives -> their high-level and backward OpKinds (docs/high-level-kinds.md).

The linear `*_jvp` primitives only survive in forward-mode programs (jax.jvp, jacfwd); they are
inlined as their reference implementation. Shape rules for the high-level and backward kinds
evaluate the kinds' reference semantics (rlx_jax.nn.kinds.KIND_REFS) abstractly.
"""
import functools

import jax
import numpy as np

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


def _ref_shape(node, *inputs):
    structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in inputs]
    out = jax.eval_shape(functools.partial(KIND_REFS[node.kind], **node.attrs), *structs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(o.shape, np.dtype(o.dtype)) for o in outs]


shape_rule(*KIND_REFS)(_ref_shape)
