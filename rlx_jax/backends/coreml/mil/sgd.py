"""SgdMomentumUpdate in MIL (ir/reference_sgd.py): per leaf t' = g + m·t, u = t' (or
g + m·t' with nesterov), p' = p + (-lr)·u: 4 ops a leaf (6 with nesterov); a schedule's step
size (a float32 scalar operand) is cast to the leaves' dtype once."""
from ....ir.ops import OpKind as K
from ....ir.reference_sgd import sgd_leaves
from .legality import mil_dtype_name
from .table import mil_rule


@mil_rule(K.SgdMomentumUpdate)
def _sgd_momentum_update(ctx, node, *operands):
    mb, a = ctx.mb, node.attrs
    step, ps, gs, ts = sgd_leaves(operands, a["lr"])
    if step is not None and ps:
        dtype = mil_dtype_name(ctx.np_dtype(ps[0]))
        step = step if mil_dtype_name(ctx.np_dtype(step)) == dtype else \
            mb.cast(x=step, dtype=dtype)
    new_p, new_t = [], []
    for p, g, t in zip(ps, gs, ts):
        m = ctx.like(a["momentum"], p)
        tn = mb.add(x=g, y=mb.mul(x=m, y=t))
        u = mb.add(x=g, y=mb.mul(x=m, y=tn)) if a["nesterov"] else tn
        scale = ctx.like(-a["lr"], p) if step is None else step
        new_p.append(mb.add(x=p, y=mb.mul(x=scale, y=u)))
        new_t.append(tn)
    return (*new_p, *new_t)
