"""Native MIL kernels for attention, rotary embeddings and softmax cross-entropy, forward and
backward (docs/high-level-kinds.md).

Attention: MIL `scaled_dot_product_attention` when the deployment target is iOS18/macOS15 or
later (its opset is the first that has it), else matmul / softmax / matmul. Masked scores
become the dtype's most negative finite value, as in the contract, so a fully masked row
attends uniformly: bool and causal masks are never handed to SDPA as bool (Core ML would use
-inf), they become one additive mask. AttentionBackward recomputes the probabilities once and
needs one reduction.

Softmax cross-entropy selects the label column with MIL's single `one_hot` op: forward 9 ops,
backward 5, whatever the class count (a decomposition by class columns is O(C) nodes).
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....tables import NATIVE_BACKWARD
from .legality import mil_dtype_name
from .table import mil_rule

SDPA_FIRST_OPSET = 9            # ct.target.iOS18 / macOS15


def has_sdpa(opset):
    return getattr(opset, "value", opset) >= SDPA_FIRST_OPSET


def _bhsd(ctx, t, layout):
    return t if layout == "BHSD" else ctx.mb.transpose(x=t, perm=ctx.ints([0, 2, 1, 3]))


def _low(ctx, like):
    return ctx.like(np.finfo(ctx.np_dtype(like)).min, like)


def _masks(ctx, node, q, mask):
    """(keep, add): a bool "keep" condition (user bool mask and/or causal) and an additive
    float mask, each None when absent; shapes broadcast against the scores [B, H, Sq, Sk]."""
    a, mb = node.attrs, ctx.mb
    keep = add = None
    if a["mask_kind"] == "additive":
        add = mask
        if node.inputs[3].dtype != node.inputs[0].dtype:
            add = mb.cast(x=mask, dtype=mil_dtype_name(node.inputs[0].dtype))
    elif a["mask_kind"] == "bool":
        keep = mask
    if a["causal"]:
        bhsd = node.inputs[0].shape if a["layout"] == "BHSD" else \
            tuple(node.inputs[0].shape[i] for i in (0, 2, 1, 3))
        sk = node.inputs[1].shape[2 if a["layout"] == "BHSD" else 1]
        tri = np.tril(np.ones((bhsd[2], sk), dtype=bool))
        causal = ctx.const(tri)
        keep = causal if keep is None else mb.logical_and(x=keep, y=causal)
    return keep, add


def probs(ctx, node, q, k, mask):
    """softmax(q·kᵀ + mask) for q already scaled, all in BHSD."""
    mb = ctx.mb
    s = mb.matmul(x=q, y=k, transpose_y=True)
    keep, add = _masks(ctx, node, q, mask)
    if add is not None:
        s = mb.add(x=s, y=add)
    if keep is not None:
        s = mb.select(cond=keep, a=s, b=_low(ctx, s))
    return mb.softmax(x=s, axis=-1)


def _scaled(ctx, t, factor):
    return t if factor == 1.0 else ctx.mb.mul(x=t, y=ctx.like(factor, t))


def _sdpa(ctx, node, q, k, v, mask):
    """SDPA divides by sqrt(D) itself: q is pre-scaled by scale·sqrt(D) (skipped when that is
    1). Bool / causal masks become one additive mask: 0 where kept, the dtype's minimum else."""
    mb = ctx.mb
    d = node.inputs[0].shape[-1]
    factor = float(np.float32(node.attrs["scale"] * np.sqrt(np.float64(d))))
    keep, add = _masks(ctx, node, q, mask)
    if keep is not None:                             # select's shape is that of a ⊔ b
        dt = ctx.np_dtype(q)
        low = ctx.const(np.full(keep.shape, np.finfo(dt).min, dt))
        add = mb.select(cond=keep, a=add if add is not None else ctx.like(0, q), b=low)
    if add is not None and add.rank < 4:             # SDPA wants the mask at the scores' rank
        add = mb.expand_dims(x=add, axes=ctx.ints(range(4 - add.rank)))
    kw = {} if add is None else {"attn_mask": add}
    return mb.scaled_dot_product_attention(query=_scaled(ctx, q, factor), key=k, value=v, **kw)


@mil_rule(K.Attention)
def _attention(ctx, node, q, k, v, *mask):
    lay, mask = node.attrs["layout"], mask[0] if mask else None
    q, k, v = (_bhsd(ctx, t, lay) for t in (q, k, v))
    if has_sdpa(ctx.opset):
        o = _sdpa(ctx, node, q, k, v, mask)
    else:
        p = probs(ctx, node, _scaled(ctx, q, node.attrs["scale"]), k, mask)
        o = ctx.mb.matmul(x=p, y=v)
    return _bhsd(ctx, o, lay)


@mil_rule(K.AttentionBackward, claim=NATIVE_BACKWARD)
def _attention_backward(ctx, node, q, k, v, *rest):
    """With qs = q·scale and p = softmax(qs·kᵀ + mask): dv = pᵀ·dout, dp = dout·vᵀ,
    ds = p·(dp − Σ_k dp·p), dq = scale·ds·k, dk = dsᵀ·qs."""
    mb, lay = ctx.mb, node.attrs["layout"]
    mask, dout = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    q, k, v, dout = (_bhsd(ctx, t, lay) for t in (q, k, v, dout))
    qs = _scaled(ctx, q, node.attrs["scale"])
    p = probs(ctx, node, qs, k, mask)
    dv = mb.matmul(x=p, y=dout, transpose_x=True)
    dp = mb.matmul(x=dout, y=v, transpose_y=True)
    row = mb.reduce_sum(x=mb.mul(x=dp, y=p), axes=ctx.ints([-1]), keep_dims=True)
    ds = mb.mul(x=p, y=mb.sub(x=dp, y=row))
    dq = _scaled(ctx, mb.matmul(x=ds, y=k), node.attrs["scale"])
    dk = mb.matmul(x=ds, y=qs, transpose_x=True)
    return tuple(_bhsd(ctx, t, lay) for t in (dq, dk, dv))


# ---- Rope (nn/rotary.py): tables [S, W] (or computed from inv_freq) lifted to x's axes ----
def _rope_tables(ctx, node, tables):
    """cos, sin with size-1 axes between the rows (x's seq_axis) and the width (and after it
    for the pairs); from inv_freq: arange(S)[:, None]·inv_freq, cos, sin (a const, 3 ops).
    Built once per program block for every node on the same operands (q's and k's, forward
    and backward)."""
    from coremltools.converters.mil.mil.block import curr_block
    mb, a = ctx.mb, node.attrs
    s = node.inputs[0].shape[a["seq_axis"]]
    key = (id(curr_block()), tuple(id(t) for t in tables), s, a["seq_axis"], a["traditional"])
    memo = ctx.__dict__.setdefault("rope_tables", {})
    if key in memo:
        return memo[key][0]
    if len(tables) == 1:     # (static sizes: Rope is not in mil/dynamic.py's SYMBOLIC_KINDS)
        ang = mb.mul(x=ctx.const(np.arange(s)[:, None], ctx.np_dtype(tables[0])), y=tables[0])
        tables = (mb.cos(x=ang), mb.sin(x=ang))
    k, rank = -a["seq_axis"] - 2, node.inputs[1].ndim
    axes = list(range(1, k + 1)) + ([k + 2] if a["traditional"] else []) if rank <= 2 else \
        [rank] * a["traditional"]                  # a table of x's rank: not lifted
    out = tuple(mb.expand_dims(x=t, axes=ctx.ints(axes)) if axes else t for t in tables)
    memo[key] = (out, tables)       # (the operands kept alive: their ids stay theirs)
    return out


def _rope(ctx, node, x, tables, backward):
    """Rotate-half: split, 4 mul, sub, add, concat (8 ops); full-width tables: x·cos +
    concat(−x2, x1)·sin, backward dy·cos + concat(v2, −v1) with v = dy·sin (6 ops); the pairs:
    a reshape to [..., D/2, 2] around the 8 (10 ops; the tables' expand_dims: 12). The
    backward rotates by −angle."""
    mb, shape = ctx.mb, node.inputs[0].shape
    cos, sin = _rope_tables(ctx, node, tables)
    if node.attrs["traditional"]:
        x = mb.reshape(x=x, shape=ctx.ints(list(shape[:-1]) + [shape[-1] // 2, 2]))
    if node.inputs[-1].shape[-1] == shape[-1]:
        if backward:
            v1, v2 = mb.split(x=mb.mul(x=x, y=sin), num_splits=2, axis=-1)
            rot = mb.concat(values=[v2, mb.mul(x=v1, y=ctx.like(-1, v1))], axis=-1)
            return mb.add(x=mb.mul(x=x, y=cos), y=rot)
        x1, x2 = mb.split(x=x, num_splits=2, axis=-1)
        rot = mb.concat(values=[mb.mul(x=x2, y=ctx.like(-1, x2)), x1], axis=-1)
        return mb.add(x=mb.mul(x=x, y=cos), y=mb.mul(x=rot, y=sin))
    x1, x2 = mb.split(x=x, num_splits=2, axis=-1)
    first, second = (mb.add, mb.sub) if backward else (mb.sub, mb.add)
    lo = first(x=mb.mul(x=x1, y=cos), y=mb.mul(x=x2, y=sin))
    hi = second(x=mb.mul(x=x2, y=cos), y=mb.mul(x=x1, y=sin))
    out = mb.concat(values=[lo, hi], axis=-1)
    return mb.reshape(x=out, shape=ctx.ints(list(shape))) if node.attrs["traditional"] else out


mil_rule(K.Rope)(lambda ctx, node, x, *tables: _rope(ctx, node, x, tables, False))
mil_rule(K.RopeBackward, claim=NATIVE_BACKWARD)(
    lambda ctx, node, dy, *tables: _rope(ctx, node, dy, tables, True))


# ---- softmax cross-entropy: logits[N, C], int32 labels[N] ----
def onehot(ctx, labels, classes, like):
    """[N, C] one-hot of the labels in `like`'s dtype: one MIL op whatever C is."""
    return ctx.mb.one_hot(indices=labels, one_hot_vector_size=classes, axis=-1,
                          on_value=ctx.like(1, like), off_value=ctx.like(0, like))


@mil_rule(K.SoftmaxCrossEntropyWithLogits)
def _sce(ctx, node, logits, labels):
    """loss = log Σ exp(l − m) − (l − m)[label], m = max(l): 9 MIL ops."""
    mb = ctx.mb
    last = ctx.ints([-1])
    sh = mb.sub(x=logits, y=mb.reduce_max(x=logits, axes=last, keep_dims=True))
    total = mb.reduce_sum(x=mb.exp(x=sh), axes=last, keep_dims=False)
    lse = mb.log(x=total, epsilon=ctx.like(0, total))
    oh = onehot(ctx, labels, node.inputs[0].shape[-1], logits)
    picked = mb.reduce_sum(x=mb.mul(x=sh, y=oh), axes=last, keep_dims=False)
    return mb.sub(x=lse, y=picked)


@mil_rule(K.SoftmaxCrossEntropyBackward, claim=NATIVE_BACKWARD)
def _sce_backward(ctx, node, logits, labels, dloss):
    """(softmax(l) − onehot(label))·dloss[:, None]: 5 MIL ops."""
    mb = ctx.mb
    diff = mb.sub(x=mb.softmax(x=logits, axis=-1),
                  y=onehot(ctx, labels, node.inputs[0].shape[-1], logits))
    return mb.mul(x=diff, y=mb.expand_dims(x=dloss, axes=ctx.ints([1])))
