"""The flat table of generated patterns: which reference formula, which of its outputs, which
replacement (passes/patterns.py explains how the patterns are generated and matched).

The references are the installed libraries' own formulas: jax.nn (softmax, gelu both forms,
silu), flax linen (LayerNorm with its fast and two-pass variance, RMSNorm, dot_product_attention
without and with a boolean mask), optax (softmax_cross_entropy_with_integer_labels) and the usual
hand-written RMSNorm; each forward alone and as the joint forward + backward of `jax.vjp`
(backward outputs read the forward's residuals). Their replacements are the high-level and
backward kinds of docs/high-level-kinds.md, whose decompositions make them runnable everywhere.
"""
import jax
import jax.numpy as jnp
import numpy as np

from ..ir.ops import OpKind as K
from .patterns import Pattern, Reference

EPS = 1.2345678e-4          # the marker of a normalization's eps in the templates
F32 = np.float32
LEAD = (2, 3, 4)


def _x(rank, *names, dim=5):
    shape = LEAD[:rank - 1] + (dim,)
    return {n: (shape, F32) for n in names}


def _vjp(fn, n):
    """The joint forward and backward of fn's first n arguments: (y, *cotangents)."""
    def joint(*args, **params):
        y, pull = jax.vjp(lambda *a: fn(*a, *args[n:-1], **params), *args[:n])
        return (y, *pull(args[-1]))
    return joint


def _vec(names):
    """Fills the [D] parameter vectors `names` and the cotangent dy from the bound x."""
    def fill(bound):
        if "x" not in bound:
            return None
        x = bound["x"]
        return {"dy": x, **{n: ((x[0][-1],), x[1]) for n in names}, **bound}
    return fill


def _sce_fill(bound):
    if "logits" not in bound or "labels" not in bound:
        return None
    return {"dy": (bound["labels"][0], bound["logits"][1]), **bound}


# ---- the reference formulas ----
def _flax_ln(fast):
    def ln(x, g, b, *, eps):
        import flax.linen as fnn
        m = fnn.LayerNorm(epsilon=eps, use_fast_variance=fast)
        return m.apply({"params": {"scale": g, "bias": b}}, x)
    return ln


def _flax_rms(x, g, *, eps):
    import flax.linen as fnn
    return fnn.RMSNorm(epsilon=eps).apply({"params": {"scale": g}}, x)


def _jnp_rms(x, g, *, eps):
    return x * jax.lax.rsqrt(jnp.mean(x ** 2, -1, keepdims=True) + eps) * g


def _optax_sce(logits, labels):
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def _flax_attention(q, k, v, *mask):
    import flax.linen as fnn
    return fnn.dot_product_attention(q, k, v, mask=mask[0] if mask else None)


def _one(fn):
    return lambda *a, **p: (fn(*a, **p),)


def _sce_example(rank):
    lead = LEAD[:rank - 1]
    return {"logits": (lead + (7,), F32), "labels": (lead, np.int32), "dy": (lead, F32)}


def _attn_example(rank, mask=False):
    q = ((2, 5, 2, 4), F32)
    ex = {"q": q, "k": ((2, 6, 2, 4), F32), "v": ((2, 6, 2, 3), F32), "dy": ((2, 5, 2, 3), F32)}
    return {**ex, "mask": ((2, 1, 5, 6), np.bool_)} if mask else ex


def _attn_fill(bound):
    """dy from q and v; v (which dv does not read) from k and dy."""
    q, k, v, dy = (bound.get(n) for n in ("q", "k", "v", "dy"))
    if q is None or k is None or (v is None and dy is None):
        return None
    v = v or (k[0][:-1] + dy[0][-1:], k[1])
    return {"dy": (q[0][:-1] + v[0][-1:], q[1]), **bound, "v": v}


NORM = {"params": {"eps": EPS}, "trigger": {(K.Activation, "rsqrt")}}
R = {
    "softmax": Reference("jax.nn.softmax", _one(jax.nn.softmax), "x", lambda r: _x(r, "x"),
                         trigger={(K.Activation, "exp")}),
    "softmax_vjp": Reference("vjp(jax.nn.softmax)", _vjp(jax.nn.softmax, 1), ("x", "dy"),
                             lambda r: _x(r, "x", "dy"), fill=_vec(""),
                             trigger={(K.Activation, "exp")}),
    "ln": Reference("flax LayerNorm", _one(_flax_ln(True)), "xgb",
                    lambda r: {**_x(r, "x"), **_x(1, "g", "b")}, **NORM),
    "ln_vjp": Reference("vjp(flax LayerNorm)", _vjp(_flax_ln(True), 3), ("x", "g", "b", "dy"),
                        lambda r: {**_x(r, "x", "dy"), **_x(1, "g", "b")},
                        fill=_vec("gb"), **NORM),
    "ln2": Reference("flax LayerNorm(use_fast_variance=False)", _one(_flax_ln(False)), "xgb",
                     lambda r: {**_x(r, "x"), **_x(1, "g", "b")}, **NORM),
    "ln2_vjp": Reference("vjp(flax LayerNorm(use_fast_variance=False))",
                         _vjp(_flax_ln(False), 3), ("x", "g", "b", "dy"),
                         lambda r: {**_x(r, "x", "dy"), **_x(1, "g", "b")},
                         fill=_vec("gb"), **NORM),
    "rms": Reference("flax RMSNorm", _one(_flax_rms), "xg",
                     lambda r: {**_x(r, "x"), **_x(1, "g")}, **NORM),
    "rms_vjp": Reference("vjp(flax RMSNorm)", _vjp(_flax_rms, 2), ("x", "g", "dy"),
                         lambda r: {**_x(r, "x", "dy"), **_x(1, "g")},
                         fill=_vec("g"), **NORM),
    "rms_jnp": Reference("x * rsqrt(mean(x**2) + eps) * g", _one(_jnp_rms), "xg",
                         lambda r: {**_x(r, "x"), **_x(1, "g")}, **NORM),
    "rms_jnp_vjp": Reference("vjp(x * rsqrt(mean(x**2) + eps) * g)", _vjp(_jnp_rms, 2),
                             ("x", "g", "dy"), lambda r: {**_x(r, "x", "dy"), **_x(1, "g")},
                             fill=_vec("g"), **NORM),
    "sce": Reference("optax softmax_cross_entropy_with_integer_labels", _one(_optax_sce),
                     ("logits", "labels"), _sce_example, trigger={(K.Activation, "log")}),
    "sce_vjp": Reference("vjp(optax softmax_cross_entropy_with_integer_labels)",
                         _vjp(_optax_sce, 1), ("logits", "labels", "dy"), _sce_example,
                         fill=_sce_fill, trigger={(K.Activation, "log")}),
    "attn": Reference("flax dot_product_attention", _one(_flax_attention), "qkv",
                      _attn_example, ranks=(4,), trigger={(K.DotGeneral, None)}),
    "attn_vjp": Reference("vjp(flax dot_product_attention)", _vjp(_flax_attention, 3),
                          ("q", "k", "v", "dy"), _attn_example, fill=_attn_fill, ranks=(4,),
                          trigger={(K.DotGeneral, None)}),
    "attn_mask": Reference("flax dot_product_attention(mask)", _one(_flax_attention),
                           ("q", "k", "v", "mask"), lambda r: _attn_example(r, True),
                           ranks=(4,), trigger={(K.DotGeneral, None)}),
    "attn_mask_vjp": Reference("vjp(flax dot_product_attention(mask))",
                               _vjp(_flax_attention, 3), ("q", "k", "v", "mask", "dy"),
                               lambda r: _attn_example(r, True), fill=_attn_fill, ranks=(4,),
                               trigger={(K.DotGeneral, None)}),
}
for _fn, _name, _fn_used in ((jax.nn.gelu, "gelu_tanh", "tanh"),
                             (lambda x: jax.nn.gelu(x, approximate=False), "gelu", "erfc"),
                             (jax.nn.silu, "silu", "sigmoid")):
    ACT = {"ranks": (2,), "trigger": {(K.Activation, _fn_used)}}
    R[_name] = Reference(f"jax.nn.{_name}", _one(_fn), "x", lambda r: _x(r, "x"), **ACT)
    R[_name + "_vjp"] = Reference(f"vjp(jax.nn.{_name})", _vjp(_fn, 1), ("x", "dy"),
                                  lambda r: _x(r, "x", "dy"), fill=_vec(""), **ACT)


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
    """The operands of the `kind` nodes emitted so far into b's graph."""
    return [next(n.inputs for n in b.graph.nodes if n.outputs and n.outputs[0] is
                 (out[0] if isinstance(out, tuple) else out))
            for (k, _, _), out in b.__dict__.get("pattern_memo", {}).items() if k is kind]


def _softmax(b, o, p, root):
    return emit(b, K.Softmax, (o["x"],), {"axis": o["x"].ndim - 1})


def _softmax_grad(b, o, p, root):
    """dx = y·(dy − Σ dy·y) on the Softmax node."""
    y, dy = _softmax(b, o, p, root), o["dy"]
    s = b.reduce("sum", b.binary("mul", dy, y), (y.ndim - 1,), keepdims=True)
    return b.binary("mul", y, b.binary("sub", dy, s))


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


def _attn_attrs(o):
    return {"scale": float(1.0 / np.sqrt(o["q"].shape[-1])), "causal": False, "layout": "BSHD",
            "mask_kind": "bool" if "mask" in o else "none"}


def _attn_operands(o):
    return tuple(o[n] for n in ("q", "k", "v", "mask") if n in o)


def _attention(b, o, p, root):
    return emit(b, K.Attention, _attn_operands(o), _attn_attrs(o))


def _attention_grad(i):
    """Output i of AttentionBackward. dv = Pᵀ·dy does not read v: its match binds none, and
    the v of the Attention node on the same q, k (and mask) is taken, so dv shares the node."""
    def replace(b, o, p, root):
        if "v" not in o:
            qk = _attn_operands(o)
            o = dict(o, v=next((ops[2] for ops in emitted(b, K.Attention)
                                if ops[:2] + ops[3:] == qk), None))
        if "dy" not in o or o["v"] is None:
            return None
        return emit(b, K.AttentionBackward, _attn_operands(o) + (o["dy"],), _attn_attrs(o), i)
    return replace


def _act(fn):
    return lambda b, o, p, root: b.unary(fn, o["x"])


def _act_grad(fn):
    return lambda b, o, p, root: emit(b, K.ActivationBackward, (o["x"], o["dy"]), {"fn": fn})


LN_FWD, LN_DX = _norm(K.LayerNorm, "xgb"), _norm(K.LayerNormBackwardInput, ("x", "g", "dy"))
LN_DG = _norm(K.LayerNormBackwardGamma, ("x", "dy"))
RMS_FWD = _norm(K.RmsNorm, "xg", has_beta=False)
RMS_DX, RMS_DG = _norm(K.RmsNormBackwardInput, ("x", "g", "dy")), \
    _norm(K.RmsNormBackwardGamma, ("x", "dy"))

# reference, output, replacement; tried in this order at a node of the root's kind
PATTERNS = [
    Pattern(R["attn_vjp"], 0, _attention), Pattern(R["attn_vjp"], 1, _attention_grad(0)),
    Pattern(R["attn_vjp"], 2, _attention_grad(1)), Pattern(R["attn_vjp"], 3, _attention_grad(2)),
    Pattern(R["attn_mask_vjp"], 0, _attention),
    Pattern(R["attn_mask_vjp"], 1, _attention_grad(0)),
    Pattern(R["attn_mask_vjp"], 2, _attention_grad(1)),
    Pattern(R["attn_mask_vjp"], 3, _attention_grad(2)),
    Pattern(R["attn"], 0, _attention), Pattern(R["attn_mask"], 0, _attention),
    Pattern(R["softmax"], 0, _softmax), Pattern(R["softmax_vjp"], 0, _softmax),
    Pattern(R["softmax_vjp"], 1, _softmax_grad),
    Pattern(R["ln"], 0, LN_FWD), Pattern(R["ln_vjp"], 0, LN_FWD),
    Pattern(R["ln_vjp"], 1, LN_DX), Pattern(R["ln_vjp"], 2, LN_DG),
    Pattern(R["ln2"], 0, LN_FWD), Pattern(R["ln2_vjp"], 0, LN_FWD),
    Pattern(R["ln2_vjp"], 1, LN_DX), Pattern(R["ln2_vjp"], 2, LN_DG),
    Pattern(R["rms"], 0, RMS_FWD), Pattern(R["rms_vjp"], 0, RMS_FWD),
    Pattern(R["rms_vjp"], 1, RMS_DX), Pattern(R["rms_vjp"], 2, RMS_DG),
    Pattern(R["rms_jnp"], 0, RMS_FWD), Pattern(R["rms_jnp_vjp"], 0, RMS_FWD),
    Pattern(R["rms_jnp_vjp"], 1, RMS_DX), Pattern(R["rms_jnp_vjp"], 2, RMS_DG),
    Pattern(R["sce"], 0, _sce), Pattern(R["sce_vjp"], 0, _sce),
    Pattern(R["sce_vjp"], 1, _sce_grad),
] + [p for fn in ("gelu_tanh", "gelu", "silu") for p in (
    Pattern(R[fn], 0, _act(fn)), Pattern(R[fn + "_vjp"], 0, _act(fn)),
    Pattern(R[fn + "_vjp"], 1, _act_grad(fn)))]
