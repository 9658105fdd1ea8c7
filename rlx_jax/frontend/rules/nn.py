"""rlx_jax.nn primitives -> their IR kinds (docs/high-level-kinds.md).

Each primitive says its kind and attributes where it is defined (nn/primitive.py). The linear
`*_jvp` primitives, which have no kind, only survive in forward-mode programs (jax.jvp, jacfwd);
they are translated as their reference implementation.
"""
import functools

import jax

from ...nn.primitive import PRIMITIVES
from . import jaxpr_rule


def _kind_rule(prim):
    def rule(ctx, *operands, **params):
        return ctx.emit(prim.kind, operands, **prim.attrs(params, operands))
    return rule


def _inline_rule(prim):
    def rule(ctx, *operands, **params):
        structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in operands]
        closed = jax.make_jaxpr(functools.partial(prim.impl, **params))(*structs)
        return ctx.translate(closed, operands)
    return rule


for _name, _prim in PRIMITIVES.items():   # one loop over the table of rlx primitives
    jaxpr_rule(_name)(_kind_rule(_prim) if _prim.kind is not None else _inline_rule(_prim))
