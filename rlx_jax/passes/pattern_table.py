"""The flat table of generated patterns: which reference formula (passes/pattern_refs.py), which
of its outputs, which replacement (passes/patterns.py explains how the patterns are generated and
matched). The replacements are the high-level and backward kinds of docs/high-level-kinds.md,
whose decompositions make them runnable everywhere.
"""
import numpy as np

from ..ir.ops import OpKind as K
from .pattern_quant import QUANT_PATTERNS
from .pattern_refs import R
from .pattern_rope import ROPE_PATTERNS
from .pattern_xent import XENT_PATTERNS
from .patterns import Pattern

__all__ = ["PATTERNS", "R", "emit", "emitted"]

# ---- replacements: (b, ops, params, root) -> value of root's type ----
def emit(b, kind, operands, attrs, index=None):
    """One node per (kind, operands, attrs) in the graph being built: a backward kind's
    outputs and a forward read by several patterns share their node."""
    memo = b.__dict__.setdefault("pattern_memo", {})
    key = (kind, tuple(v.id for v in operands), tuple(sorted(attrs.items())))
    if key not in memo:
        memo[key] = b.add(kind, operands, attrs)
    out = memo[key]
    return out if index is None else out[index]


def emitted(b, kind):
    """(operands, attrs) of the `kind` nodes emitted so far into b's graph."""
    return [(next(n.inputs for n in b.graph.nodes if n.outputs and n.outputs[0] is
                  (out[0] if isinstance(out, tuple) else out)), dict(attrs))
            for (k, _, attrs), out in b.__dict__.get("pattern_memo", {}).items() if k is kind]


def _softmax(b, o, p, root):
    return emit(b, K.Softmax, (o["x"],), {"axis": o["x"].ndim - 1})


def _softmax_grad(b, o, p, root):
    """dx = y·(dy − Σ dy·y) on the Softmax node."""
    y, dy = _softmax(b, o, p, root), o["dy"]
    s = b.reduce("sum", b.binary("mul", dy, y), (y.ndim - 1,), keepdims=True)
    return b.binary("mul", y, b.binary("sub", dy, s))


def _log_softmax(b, o, p, root):
    return emit(b, K.LogSoftmax, (o["x"],), {"axis": o["x"].ndim - 1})


def _log_softmax_grad(b, o, p, root):
    """dx = dy − exp(y)·Σ dy on the LogSoftmax node."""
    y, dy = _log_softmax(b, o, p, root), o["dy"]
    s = b.reduce("sum", dy, (y.ndim - 1,), keepdims=True)
    return b.binary("sub", dy, b.binary("mul", b.unary("exp", y), s))


def _norm(kind, names, **extra):
    def replace(b, o, p, root):
        return emit(b, kind, tuple(o[n] for n in names), {"eps": float(p["eps"]), **extra})
    return replace


def _rows(b, v):
    return b.reshape(v, (v.size // v.shape[-1], v.shape[-1]))


def _sce(b, o, p, root):
    logits, labels = o["logits"], o["labels"]
    if logits.ndim < 1 or labels.dtype.kind not in "iu":
        return None
    n = int(np.prod(labels.shape, dtype=np.int64))
    loss = emit(b, K.SoftmaxCrossEntropyWithLogits, (_rows(b, logits), b.reshape(labels, (n,))),
                {})
    return b.reshape(loss, root.shape)


def _sce_grad(b, o, p, root):
    logits, labels, dy = o["logits"], o["labels"], o["dy"]
    n = int(np.prod(labels.shape, dtype=np.int64))
    d = emit(b, K.SoftmaxCrossEntropyBackward,
             (_rows(b, logits), b.reshape(labels, (n,)), b.reshape(dy, (n,))), {})
    return b.reshape(d, root.shape)


def _attn_attrs(o, p, causal, mask_kind):
    scale = p["scale"] if "scale" in p else 1.0 / np.sqrt(o["q"].shape[-1])
    return {"scale": float(scale), "causal": causal, "layout": "BSHD",
            "mask_kind": mask_kind if "mask" in o else "none"}


def _attn_operands(o):
    return tuple(o[n] for n in ("q", "k", "v", "mask") if n in o)


def _same_heads(o):
    """The kind has one head count: jax.nn's grouped-query attention (fewer k, v heads) is
    left alone."""
    return all(o[n].shape[2] == o["q"].shape[2] for n in ("k", "v") if n in o)


def _attention(causal=False, mask_kind="bool"):
    def replace(b, o, p, root):
        if not _same_heads(o):
            return None
        return emit(b, K.Attention, _attn_operands(o), _attn_attrs(o, p, causal, mask_kind))
    return replace


def _attention_grad(i, causal=False, mask_kind="bool"):
    """Output i of AttentionBackward. dv = Pᵀ·dy does not read v: its match binds none, and
    the v of the Attention node on the same q, k (and mask) is taken, so dv shares the node."""
    def replace(b, o, p, root):
        attrs = _attn_attrs(o, p, causal, mask_kind)
        if "v" not in o:
            qk = _attn_operands(o)
            o = dict(o, v=next((ops[2] for ops, at in emitted(b, K.Attention)
                                if ops[:2] + ops[3:] == qk and at == attrs), None))
        if "dy" not in o or o["v"] is None or not _same_heads(o):
            return None
        return emit(b, K.AttentionBackward, _attn_operands(o) + (o["dy"],), attrs, i)
    return replace


def _act(fn):
    return lambda b, o, p, root: b.unary(fn, o["x"])


def _act_grad(fn):
    return lambda b, o, p, root: emit(b, K.ActivationBackward, (o["x"], o["dy"]), {"fn": fn})


def _affine(kind, names):
    """A LayerNorm kind whose formula lacks its scale (or bias): gamma = 1 (beta = 0)."""
    def replace(b, o, p, root):
        x = o["x"]
        o = {"g": b.const(np.ones(x.shape[-1:], x.dtype)),
             "b": b.const(np.zeros(x.shape[-1:], x.dtype)), **o}
        return emit(b, kind, tuple(o[n] for n in names), {"eps": float(p["eps"])})
    return replace


LN_FWD, LN_DX = _affine(K.LayerNorm, "xgb"), _affine(K.LayerNormBackwardInput, ("x", "g", "dy"))
LN_DG = _norm(K.LayerNormBackwardGamma, ("x", "dy"))
RMS_FWD = _norm(K.RmsNorm, "xg", has_beta=False)
RMS_DX, RMS_DG = _norm(K.RmsNormBackwardInput, ("x", "g", "dy")), \
    _norm(K.RmsNormBackwardGamma, ("x", "dy"))


def _fwd_bwd(key, vjp_key, fwd, *bwd):
    """The forward alone (R[key]), then the joint forward and backward (R[vjp_key]): output 0
    the forward, output i the replacement bwd[i - 1] (None: not replaced)."""
    return [Pattern(R[key], 0, fwd), Pattern(R[vjp_key], 0, fwd)] + [
        Pattern(R[vjp_key], i + 1, r) for i, r in enumerate(bwd) if r is not None]


def _attn_family(key, vjp_key, causal=False, mask_kind="bool"):
    fwd = _attention(causal, mask_kind)
    grads = [_attention_grad(i, causal, mask_kind) for i in range(3)]
    return [Pattern(R[vjp_key], 0, fwd)] + [
        Pattern(R[vjp_key], i + 1, g) for i, g in enumerate(grads)] + [
        Pattern(R[key], 0, fwd)]


# ---- the replacements of the derived references: softmax over any one axis, flax
# GroupNorm, equinox RMSNorm ----
def _softmax_k(b, o, p, root):
    return emit(b, K.Softmax, (o["x"],), {"axis": p["axis"] % o["x"].ndim})


def _softmax_k_grad(b, o, p, root):
    """dx = y·(dy − Σ_axis dy·y) on the Softmax node."""
    y, dy = _softmax_k(b, o, p, root), o["dy"]
    s = b.reduce("sum", b.binary("mul", dy, y), (p["axis"] % y.ndim,), keepdims=True)
    return b.binary("mul", y, b.binary("sub", dy, s))


def _group(kind, names):
    """A GroupNorm kind (gamma = 1 / beta = 0 where the formula lacks its scale / bias); x
    must be [N, ..., C] with C divisible by the group count."""
    def replace(b, o, p, root):
        x, groups = o["x"], int(p["num_groups"])
        if x.ndim < 2 or groups < 1 or x.shape[-1] % groups:
            return None
        o = {"g": b.const(np.ones(x.shape[-1:], x.dtype)),
             "b": b.const(np.zeros(x.shape[-1:], x.dtype)), **o}
        return emit(b, kind, tuple(o[n] for n in names),
                    {"num_groups": groups, "eps": float(p["eps"])})
    return replace


GN_FWD, GN_DX = _group(K.GroupNorm, "xgb"), _group(K.GroupNormBackwardInput, ("x", "g", "dy"))
GN_DG = _group(K.GroupNormBackwardGamma, ("x", "dy"))


def _lora(b, o, p, root):
    """LoraMatMul where W, A, B are matrices chained as x·W and x·A·B; a bias (flax Dense's)
    is added to its result, broadcast as the formula does."""
    x, w, a, bb = o["x"], o["w"], o["a"], o["b"]
    if not (w.ndim == a.ndim == bb.ndim == 2 and x.ndim >= 1):
        return None
    out = emit(b, K.LoraMatMul, (x, w, a, bb), {"scale": float(p.get("scale", 1.0))})
    if "bias" in o:
        if o["bias"].shape != out.shape[-1:]:
            return None
        out = b.binary("add", out, b.expand(o["bias"], out.shape))
    return out


# reference, output, replacement; tried in this order at a node of the root's kind
PATTERNS = [
    *_attn_family("attn", "attn_vjp"),
    *_attn_family("attn_mask", "attn_mask_vjp"),
    *_attn_family("eqx_attn", "eqx_attn_vjp"),
    *_attn_family("eqx_attn_mask", "eqx_attn_mask_vjp"),
    *_attn_family("jax_attn", "jax_attn_vjp"),
    *_attn_family("jax_attn_causal", "jax_attn_causal_vjp", causal=True),
    *_attn_family("jax_attn_mask", "jax_attn_mask_vjp"),
    *_attn_family("jax_attn_bias", "jax_attn_bias_vjp", mask_kind="additive"),
    *_fwd_bwd("softmax", "softmax_vjp", _softmax, _softmax_grad),
    *_fwd_bwd("ln", "ln_vjp", LN_FWD, LN_DX, LN_DG),
    *_fwd_bwd("ln2", "ln2_vjp", LN_FWD, LN_DX, LN_DG),
    *_fwd_bwd("eqx_ln", "eqx_ln_vjp", LN_FWD, LN_DX, LN_DG),
    *_fwd_bwd("ln_nobias", "ln_nobias_vjp", LN_FWD, LN_DX, LN_DG),
    *_fwd_bwd("ln_noscale", "ln_noscale_vjp", LN_FWD, LN_DX),
    *_fwd_bwd("ln_noaffine", "ln_noaffine_vjp", LN_FWD, LN_DX),
    *_fwd_bwd("rms", "rms_vjp", RMS_FWD, RMS_DX, RMS_DG),
    *_fwd_bwd("rms_jnp", "rms_jnp_vjp", RMS_FWD, RMS_DX, RMS_DG),
    *_fwd_bwd("sce", "sce_vjp", _sce, _sce_grad),
    *XENT_PATTERNS,          # before log_softmax's: its gradient is a part of theirs
    *_fwd_bwd("gelu_tanh", "gelu_tanh_vjp", _act("gelu_tanh"), _act_grad("gelu_tanh")),
    *_fwd_bwd("gelu", "gelu_vjp", _act("gelu"), _act_grad("gelu")),
    *_fwd_bwd("silu", "silu_vjp", _act("silu"), _act_grad("silu")),
    *_fwd_bwd("log_softmax", "log_softmax_vjp", _log_softmax, _log_softmax_grad),
    *_fwd_bwd("softmax_axis", "softmax_axis_vjp", _softmax_k, _softmax_k_grad),
    *_fwd_bwd("gn", "gn_vjp", GN_FWD, GN_DX, GN_DG),
    *_fwd_bwd("gn2", "gn2_vjp", GN_FWD, GN_DX, GN_DG),
    *_fwd_bwd("gn_nobias", "gn_nobias_vjp", GN_FWD, GN_DX, GN_DG),
    *_fwd_bwd("gn_noscale", "gn_noscale_vjp", GN_FWD, GN_DX),
    *_fwd_bwd("gn_noaffine", "gn_noaffine_vjp", GN_FWD, GN_DX),
    *_fwd_bwd("eqx_rms", "eqx_rms_vjp", _norm(K.RmsNorm, "xgb", has_beta=True), RMS_DX, RMS_DG),
    *_fwd_bwd("eqx_rms_nobias", "eqx_rms_nobias_vjp", RMS_FWD, RMS_DX, RMS_DG),
    Pattern(R["lora"], 0, _lora),
    Pattern(R["lora_noscale"], 0, _lora),
    *[Pattern(R[k], 0, _lora) for k in ("lora_bias", "lora_bias_noscale", "lora_flax",
                                         "lora_flax_noscale")],
    *QUANT_PATTERNS,
    *ROPE_PATTERNS,
]
