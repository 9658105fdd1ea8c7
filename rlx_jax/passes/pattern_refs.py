"""The reference formulas of the generated patterns (passes/patterns.py explains how they are
traced and matched; passes/pattern_table.py maps their outputs to kinds).

They are the installed libraries' own formulas: jax.nn (softmax, gelu both forms, silu,
dot_product_attention's default implementation without a mask, causal, with a boolean mask or an
additive bias), flax linen (LayerNorm with its fast and two-pass variance, without scale or
bias, RMSNorm, dot_product_attention without and with a boolean mask), equinox (nn.LayerNorm
and the attention of nn.MultiheadAttention, each under jax.vmap as they are called), optax
(softmax_cross_entropy_with_integer_labels) and the usual hand-written RMSNorm; each forward
alone and as the joint forward + backward of `jax.vjp` (backward outputs read the forward's
residuals). A library that is not installed only leaves its templates out.

Then the references whose parameters are read off the user's graph (`Reference.derive`):
jax.nn.softmax over any one axis, flax GroupNorm (with and without scale / bias, both
variances; its group count) and equinox RMSNorm (with and without its bias).
"""
import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..ir.ops import OpKind as K
from .patterns import Reference

EPS = 1.2345678e-4          # the marker of a normalization's eps in the templates
SCALE = 0.87654321          # the marker of jax.nn.dot_product_attention's scale
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


def _one(fn):
    return lambda *a, **p: (fn(*a, **p),)


def _vec(names):
    """Fills the [D] parameter vectors `names` and the cotangent dy from the bound x."""
    def fill(bound):
        if "x" not in bound:
            return None
        x = bound["x"]
        return {"dy": x, **{n: ((x[0][-1],), x[1]) for n in names}, **bound}
    return fill


def _vmapped(fn, times):
    for _ in range(times):
        fn = jax.vmap(fn)
    return fn


# ---- normalizations ----
def _flax_ln(fast, scale=True, bias=True):
    def ln(x, *gb, eps):
        import flax.linen as fnn
        m = fnn.LayerNorm(epsilon=eps, use_fast_variance=fast, use_scale=scale, use_bias=bias,
                          dtype=x.dtype)
        names = ("scale",) * scale + ("bias",) * bias
        return m.apply({"params": dict(zip(names, gb))}, x)
    return ln


def _eqx_ln(x, g, b, *, eps):
    """equinox's LayerNorm(D) applied to every row of x, as jax.vmap calls it."""
    import equinox as eqx
    m = eqx.nn.LayerNorm(x.shape[-1], eps=eps)
    m = eqx.tree_at(lambda m: (m.weight, m.bias), m, (g, b))
    return _vmapped(m, x.ndim - 1)(x)


def _flax_rms(x, g, *, eps):
    import flax.linen as fnn
    return fnn.RMSNorm(epsilon=eps, dtype=x.dtype).apply({"params": {"scale": g}}, x)


def _jnp_rms(x, g, *, eps):
    return x * jax.lax.rsqrt(jnp.mean(x ** 2, -1, keepdims=True) + eps) * g


# ---- cross-entropy ----
def _optax_sce(logits, labels):
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def _sce_example(rank):
    lead = LEAD[:rank - 1]
    return {"logits": (lead + (7,), F32), "labels": (lead, np.int32), "dy": (lead, F32)}


def _sce_fill(bound):
    if "logits" not in bound or "labels" not in bound:
        return None
    return {"dy": (bound["labels"][0], bound["logits"][1]), **bound}


# ---- attention: q[B, Sq, H, D], k[B, Sk, H, D], v[B, Sk, H, Dv] (BSHD) ----
def _flax_attention(q, k, v, *mask):
    import flax.linen as fnn
    return fnn.dot_product_attention(q, k, v, mask=mask[0] if mask else None)


def _eqx_attention(q, k, v, *mask):
    """The attention of equinox's MultiheadAttention on a batch: its dot_product_attention
    (the function MultiheadAttention calls, from the module defining it) vmapped over the heads
    (axis 1 of a sequence) and over the batch; the mask [Sq, Sk] is shared by both."""
    import equinox as eqx
    core = sys.modules[eqx.nn.MultiheadAttention.__module__].dot_product_attention
    attn = functools.partial(core, mask=mask[0] if mask else None)
    return jax.vmap(jax.vmap(attn, in_axes=1, out_axes=1))(q, k, v)


def _jax_attention(causal, extra):
    """jax.nn.dot_product_attention (default implementation); extra: () or ("mask",) or
    ("bias",), the keyword its one extra argument is passed as."""
    def fn(q, k, v, *rest, scale):
        return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal,
                                            **dict(zip(extra, rest)))
    return fn


def _attn_example(rank, mask=None, dv=3):
    """The attention templates are 4-d; template "rank" 5 of jax.nn's has a per-head mask
    [B, H, Sq, Sk] (it reshapes those to its grouped layout), 4 one shared by the heads."""
    ex = {"q": ((2, 5, 2, 4), F32), "k": ((2, 6, 2, 4), F32), "v": ((2, 6, 2, dv), F32),
          "dy": ((2, 5, 2, dv), F32)}
    heads = 2 if rank == 5 else 1
    masks = {"flax": ((2, 1, 5, 6), np.bool_), "eqx": ((5, 6), np.bool_),
             "bool": ((2, heads, 5, 6), np.bool_), "bias": ((2, heads, 5, 6), F32)}
    return {**ex, "mask": masks[mask]} if mask else ex


def _attn_fill(bound):
    """dy from q and v; v (which dv does not read) from k and dy."""
    q, k, v, dy = (bound.get(n) for n in ("q", "k", "v", "dy"))
    if q is None or k is None or (v is None and dy is None):
        return None
    v = v or (k[0][:-1] + dy[0][-1:], k[1])
    return {"dy": (q[0][:-1] + v[0][-1:], q[1]), **bound, "v": v}


# ---- the table: each formula forward alone (key) and with its jax.vjp (vjp_key) ----
R = {}


def _pair(key, vjp_key, name, fn, inputs, n, example, fill, **kw):
    """Registers fn (forward, R[key]) and the joint forward + backward of its first n inputs
    (R[vjp_key])."""
    inputs = tuple(inputs)
    R[key] = Reference(name, _one(fn), inputs, example, **kw)
    R[vjp_key] = Reference(f"vjp({name})", _vjp(fn, n), inputs + ("dy",), example,
                                fill=fill, **kw)


def _norm_example(*vecs):
    return lambda r: {**_x(r, "x", "dy"), **_x(1, *vecs)}


# (a flax module's dtype is x's: the output of nn.LayerNorm(dtype=bf16, param_dtype=float32))
NORM = {"params": {"eps": EPS}, "trigger": {(K.Activation, "rsqrt")}, "weights": "gb"}
_pair("softmax", "softmax_vjp", "jax.nn.softmax", jax.nn.softmax, "x", 1,
      lambda r: _x(r, "x", "dy"), _vec(""), trigger={(K.Activation, "exp")})
_pair("ln", "ln_vjp", "flax LayerNorm", _flax_ln(True), "xgb", 3, _norm_example("g", "b"),
      _vec("gb"), **NORM)
_pair("ln2", "ln2_vjp", "flax LayerNorm(use_fast_variance=False)", _flax_ln(False), "xgb", 3,
      _norm_example("g", "b"), _vec("gb"), **NORM)
_pair("ln_nobias", "ln_nobias_vjp", "flax LayerNorm(use_bias=False)", _flax_ln(True, bias=False),
      "xg", 2, _norm_example("g"), _vec("g"), **NORM)
_pair("ln_noscale", "ln_noscale_vjp", "flax LayerNorm(use_scale=False)",
      _flax_ln(True, scale=False), "xb", 2, _norm_example("b"), _vec("b"), **NORM)
_pair("ln_noaffine", "ln_noaffine_vjp", "flax LayerNorm(use_scale=False, use_bias=False)",
      _flax_ln(True, False, False), "x", 1, _norm_example(), _vec(""), **NORM)
_pair("eqx_ln", "eqx_ln_vjp", "equinox LayerNorm", _eqx_ln, "xgb", 3, _norm_example("g", "b"),
      _vec("gb"), **NORM)
_pair("rms", "rms_vjp", "flax RMSNorm", _flax_rms, "xg", 2, _norm_example("g"), _vec("g"), **NORM)
_pair("rms_jnp", "rms_jnp_vjp", "x * rsqrt(mean(x**2) + eps) * g", _jnp_rms, "xg", 2,
      _norm_example("g"), _vec("g"), **NORM)
_pair("sce", "sce_vjp", "optax softmax_cross_entropy_with_integer_labels", _optax_sce,
      ("logits", "labels"), 1, _sce_example, _sce_fill, trigger={(K.Activation, "log")})

ATTN = {"ranks": (4,), "trigger": {(K.DotGeneral, None), (K.Activation, "exp")}}
QKV, QKVM = ("q", "k", "v"), ("q", "k", "v", "mask")
_pair("attn", "attn_vjp", "flax dot_product_attention", _flax_attention, QKV, 3, _attn_example,
      _attn_fill, **ATTN)
_pair("attn_mask", "attn_mask_vjp", "flax dot_product_attention(mask)", _flax_attention, QKVM, 3,
      lambda r: _attn_example(r, "flax"), _attn_fill, **ATTN)
_pair("eqx_attn", "eqx_attn_vjp", "equinox MultiheadAttention's attention", _eqx_attention, QKV, 3,
      _attn_example, _attn_fill, **ATTN)
_pair("eqx_attn_mask", "eqx_attn_mask_vjp", "equinox MultiheadAttention's attention(mask)",
      _eqx_attention, QKVM, 3, lambda r: _attn_example(r, "eqx"), _attn_fill, **ATTN)
for _key, _vjp_key, _causal, _extra, _mask in (
        ("jax_attn", "jax_attn_vjp", False, (), None),
        ("jax_attn_causal", "jax_attn_causal_vjp", True, (), None),
        ("jax_attn_mask", "jax_attn_mask_vjp", False, ("mask",), "bool"),
        ("jax_attn_bias", "jax_attn_bias_vjp", False, ("bias",), "bias")):
    _pair(_key, _vjp_key,
          f"jax.nn.dot_product_attention(is_causal={_causal}, {', '.join(_extra)})",
          _jax_attention(_causal, _extra), QKVM if _extra else QKV, 3,
          functools.partial(_attn_example, mask=_mask, dv=4), _attn_fill, params={"scale": SCALE},
          **{**ATTN, "ranks": (4, 5) if _mask else (4,)})

_fn: Callable[..., Any]
for _name, _vjp_name, _fn, _fn_used in (
        ("gelu_tanh", "gelu_tanh_vjp", jax.nn.gelu, "tanh"),
        ("gelu", "gelu_vjp", lambda x: jax.nn.gelu(x, approximate=False), "erfc"),
        ("silu", "silu_vjp", jax.nn.silu, "sigmoid")):
    _pair(_name, _vjp_name, f"jax.nn.{_name}", _fn, "x", 1, lambda r: _x(r, "x", "dy"), _vec(""),
          ranks=(2,), trigger={(K.Activation, _fn_used)})


# ---- softmax over any one axis: the axis is read off the user's max ----
def _softmax_axis(template, user):
    """{"axis": k} from the axes of the user's Reduce max (one axis), else None."""
    got = [user(n.out) for n in template.nodes if n.kind is K.Reduce and n.attrs["fn"] == "max"]
    axes = got[0].node.attrs["axes"] if got and got[0] is not None else ()
    return {"axis": axes[0]} if len(axes) == 1 else None


def _softmax_at(x, *, axis=-1):
    return jax.nn.softmax(x, axis=axis)


_pair("softmax_axis", "softmax_axis_vjp", "jax.nn.softmax(axis=k)", _softmax_at, "x", 1,
      lambda r: _x(r, "x", "dy"), _vec(""), trigger={(K.Activation, "exp")},
      derive=_softmax_axis)


# ---- flax GroupNorm (x[N, ..., C]); the group count is read off the user's reshape of x ----
def _flax_gn(scale=True, bias=True, fast=True):
    def gn(x, *gb, eps, num_groups=None):
        import flax.linen as fnn
        num_groups = num_groups or x.shape[-1] // 3      # templates: C // 3 groups
        m = fnn.GroupNorm(num_groups=num_groups, epsilon=eps, use_scale=scale, use_bias=bias,
                          use_fast_variance=fast, dtype=x.dtype)
        names = ("scale",) * scale + ("bias",) * bias
        return m.apply({"params": dict(zip(names, gb))}, x)
    return gn


def _groups(template, user):
    """{"num_groups": G} from the user's reshape of x to [N, ..., G, C/G], else None."""
    for n in template.nodes:
        if n.kind is K.Reshape and n.inputs[0].node.kind is K.Input and \
                n.inputs[0].node.attrs["index"] == 0 and user(n.out) is not None:
            return {"num_groups": user(n.out).shape[-2]} if user(n.out).ndim >= 3 else None
    return None


def _gn_example(*vecs):
    """Template r: rank |r|, C = 6 (two groups) or, when r < 0, C = 3 (one group: the
    transposes of flax's jnp.repeat differ there)."""
    def example(r):
        c = 6 if r > 0 else 3
        return {**_x(abs(r), "x", "dy", dim=c), **_x(1, *vecs, dim=c)}
    return example


GN = {**NORM, "derive": _groups, "ranks": (2, 3, -2, -3)}
_pair("gn", "gn_vjp", "flax GroupNorm", _flax_gn(), "xgb", 3, _gn_example("g", "b"), _vec("gb"),
      **GN)
_pair("gn2", "gn2_vjp", "flax GroupNorm(use_fast_variance=False)", _flax_gn(fast=False), "xgb", 3,
      _gn_example("g", "b"), _vec("gb"), **GN)
_pair("gn_nobias", "gn_nobias_vjp", "flax GroupNorm(use_bias=False)", _flax_gn(bias=False), "xg",
      2, _gn_example("g"), _vec("g"), **GN)
_pair("gn_noscale", "gn_noscale_vjp", "flax GroupNorm(use_scale=False)", _flax_gn(scale=False),
      "xb", 2, _gn_example("b"), _vec("b"), **GN)
_pair("gn_noaffine", "gn_noaffine_vjp", "flax GroupNorm(use_scale=False, use_bias=False)",
      _flax_gn(False, False), "x", 1, _gn_example(), _vec(""), **GN)


# ---- equinox RMSNorm(D) (use_bias True by default) under jax.vmap ----
def _eqx_rms(x, g, *b, eps):
    import equinox as eqx
    m = eqx.nn.RMSNorm(x.shape[-1], eps=eps, use_bias=bool(b))
    m = eqx.tree_at(lambda m: (m.weight, m.bias) if b else m.weight, m, (g, *b) if b else g)
    return _vmapped(m, x.ndim - 1)(x)


_pair("eqx_rms", "eqx_rms_vjp", "equinox RMSNorm", _eqx_rms, "xgb", 3, _norm_example("g", "b"),
      _vec("gb"), **NORM)
_pair("eqx_rms_nobias", "eqx_rms_nobias_vjp", "equinox RMSNorm(use_bias=False)", _eqx_rms, "xg", 2,
      _norm_example("g"), _vec("g"), **NORM)

# (jax.grad of a log_softmax alone has no log: its backward reads only exp(x - max))
_pair("log_softmax", "log_softmax_vjp", "jax.nn.log_softmax", jax.nn.log_softmax, "x", 1,
      lambda r: _x(r, "x", "dy"), _vec(""), trigger={(K.Activation, "exp")})


# ---- LoRA: x @ W [+ bias] + (x @ A @ B) * scale (and without the scale), x of rank 2 or 3:
# the bias form is flax's nn.Dense(x) + the low-rank product ----
LORA_SCALE = 0.76543211          # the marker of the LoRA scale in the template


def _lora(x, w, a, b, *bias, scale=None):
    low = x @ a @ b
    dense = x @ w + bias[0] if bias else x @ w
    return (dense + (low if scale is None else low * scale),)


def _lora_flax(x, w, a, b, bias, *, scale=None):
    """flax nn.Dense (its own code: the bias added through a reshape) + the low-rank product."""
    import flax.linen as nn
    dense = nn.Dense(w.shape[1]).apply({"params": {"kernel": w, "bias": bias}}, x)
    low = x @ a @ b
    return (dense + (low if scale is None else low * scale),)


def _lora_example(rank):
    return {"x": (LEAD[:rank - 1] + (5,), F32), "w": ((5, 6), F32), "a": ((5, 2), F32),
            "b": ((2, 6), F32), "bias": ((6,), F32)}


for _key, _fn, _params, _inputs in (
        ("lora", _lora, {"scale": LORA_SCALE}, "xwab"),
        ("lora_noscale", _lora, {}, "xwab"),
        ("lora_bias", _lora, {"scale": LORA_SCALE}, "xwab+"),
        ("lora_bias_noscale", _lora, {}, "xwab+"),
        ("lora_flax", _lora_flax, {"scale": LORA_SCALE}, "xwab+"),
        ("lora_flax_noscale", _lora_flax, {}, "xwab+")):
    R[_key] = Reference(
        f"LoRA {'flax nn.Dense(x)' if _fn is _lora_flax else 'x @ W'}"
        f"{' + bias' if _fn is _lora and '+' in _inputs else ''} + (x @ A @ B)"
        f"{' * scale' if _params else ''}", _fn,
        ("x", "w", "a", "b") + (("bias",) if "+" in _inputs else ()), _lora_example,
        params=_params, ranks=(2, 3), trigger={(K.DotGeneral, None)})
