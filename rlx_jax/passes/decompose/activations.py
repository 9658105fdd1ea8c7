"""Decompositions of softmax, activation backward, softmax cross-entropy, attention and rope."""
import math

import numpy as np

from ...ir.ops import OpKind as K
from . import decomp
from ...nn.rotary import rope_backward_ref, rope_ref
from .formulas import inline, onehot, softmax


@decomp(K.Softmax)
def _softmax(b, node, x):
    axis = node.attrs["axis"]
    e = b.unary("exp", b.binary("sub", x, b.reduce("max", x, (axis,), keepdims=True)))
    return b.binary("div", e, b.reduce("sum", e, (axis,), keepdims=True))


@decomp(K.LogSoftmax)
def _log_softmax(b, node, x):
    """(x - max) - log Σ exp(x - max), as jax.nn.log_softmax computes it."""
    axis = node.attrs["axis"]
    shifted = b.binary("sub", x, b.reduce("max", x, (axis,), keepdims=True))
    total = b.reduce("sum", b.unary("exp", shifted), (axis,), keepdims=True)
    return b.binary("sub", shifted, b.unary("log", total))


@decomp(K.ReluBackward)
def _relu_backward(b, node, x, dy):
    zero = b.scalar(0, x)
    return b.where(b.compare("gt", x, zero), dy, b.scalar(0, dy))


def _gelu_grad(b, x):
    """Φ(x) + x·φ(x)."""
    c = lambda v: b.scalar(v, x)  # noqa: E731
    cdf = b.binary("mul", c(0.5), b.binary("add", c(1), b.unary(
        "erf", b.binary("mul", x, c(1 / math.sqrt(2))))))
    pdf = b.binary("mul", c(1 / math.sqrt(2 * math.pi)), b.unary(
        "exp", b.binary("mul", c(-0.5), b.binary("mul", x, x))))
    return b.binary("add", cdf, b.binary("mul", x, pdf))


def _gelu_tanh_grad(b, x):
    """0.5(1 + t) + 0.5·x·(1 − t²)·√(2/π)(1 + 3·0.044715·x²),
    t = tanh(√(2/π)(x + 0.044715x³))."""
    c = lambda v: b.scalar(v, x)  # noqa: E731
    k = math.sqrt(2 / math.pi)
    x2 = b.binary("mul", x, x)
    inner = b.binary("mul", c(k), b.binary("add", x, b.binary("mul", c(0.044715),
                                                              b.binary("mul", x2, x))))
    t = b.unary("tanh", inner)
    left = b.binary("mul", c(0.5), b.binary("add", c(1), t))
    du = b.binary("mul", c(k), b.binary("add", c(1), b.binary("mul", c(3 * 0.044715), x2)))
    sech2 = b.binary("sub", c(1), b.binary("mul", t, t))
    return b.binary("add", left, b.binary("mul", b.binary("mul", c(0.5), x),
                                           b.binary("mul", sech2, du)))


def _silu_grad(b, x):
    s = b.unary("sigmoid", x)
    return b.binary("mul", s, b.binary("add", b.scalar(1, x), b.binary(
        "mul", x, b.binary("sub", b.scalar(1, x), s))))


def _sigmoid_grad(b, x):
    s = b.unary("sigmoid", x)
    return b.binary("mul", s, b.binary("sub", b.scalar(1, x), s))


def _tanh_grad(b, x):
    t = b.unary("tanh", x)
    return b.binary("sub", b.scalar(1, x), b.binary("mul", t, t))


def _relu_grad(b, x):
    return b.cast(b.compare("gt", x, b.scalar(0, x)), x.dtype)


ACTIVATION_GRADS = {"gelu": _gelu_grad, "gelu_tanh": _gelu_tanh_grad, "silu": _silu_grad,
                    "sigmoid": _sigmoid_grad, "tanh": _tanh_grad, "relu": _relu_grad}


@decomp(K.ActivationBackward)
def _activation_backward(b, node, x, dy):
    return b.binary("mul", dy, ACTIVATION_GRADS[node.attrs["fn"]](b, x))


@decomp(K.SoftmaxCrossEntropyWithLogits)
def _sce(b, node, logits, labels):
    n, c = logits.shape
    m = b.reduce("max", logits, (1,), keepdims=True)
    s = b.reduce("sum", b.unary("exp", b.binary("sub", logits, m)), (1,))
    lse = b.binary("add", b.unary("log", s), b.reshape(m, (n,)))
    picked = b.reduce("sum", b.binary("mul", logits, onehot(b, labels, c, logits.dtype)), (1,))
    return b.binary("sub", lse, picked)


@decomp(K.SoftmaxCrossEntropyBackward)
def _sce_backward(b, node, logits, labels, dloss):
    n, c = logits.shape
    diff = b.binary("sub", softmax(b, logits, 1), onehot(b, labels, c, logits.dtype))
    return b.binary("mul", diff, b.reshape(dloss, (n, 1)))


# ---- attention ----
def _bhsd(b, t, layout):
    return t if layout == "BHSD" else b.transpose(t, (0, 2, 1, 3))


def _probs(b, q, k, mask, a):
    """softmax(q·kᵀ·scale + mask) in BHSD."""
    s = b.dot_general(q, k, ((3,), (3,)), ((0, 1), (0, 1)))
    s = b.binary("mul", s, b.scalar(a["scale"], s))
    low = b.scalar(np.finfo(s.dtype).min, s)
    if a["mask_kind"] != "none":
        m = b.reshape(mask, (1,) * (4 - mask.ndim) + mask.shape)
        if a["mask_kind"] == "additive":
            s = b.binary("add", s, b.cast(m, s.dtype))
        else:
            s = b.where(m, s, low)
    if a["causal"]:
        sq, sk = s.shape[2:]
        i = b.add(K.Iota, (), {"dtype": np.dtype(np.int32), "shape": (1, 1, sq, sk),
                               "dimension": 2})
        j = b.add(K.Iota, (), {"dtype": np.dtype(np.int32), "shape": (1, 1, sq, sk),
                               "dimension": 3})
        s = b.where(b.compare("le", j, i), s, low)
    return softmax(b, s, 3)


def _split_mask(rest):
    return (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])


@decomp(K.Attention)
def _attention(b, node, q, k, v, *mask):
    a = node.attrs
    lay = a["layout"]
    p = _probs(b, _bhsd(b, q, lay), _bhsd(b, k, lay), mask[0] if mask else None, a)
    o = b.dot_general(p, _bhsd(b, v, lay), ((3,), (2,)), ((0, 1), (0, 1)))
    return _bhsd(b, o, lay)


@decomp(K.AttentionBackward)
def _attention_backward(b, node, q, k, v, *rest):
    a = node.attrs
    lay = a["layout"]
    mask, dout = _split_mask(rest)
    q, k, v, dout = (_bhsd(b, t, lay) for t in (q, k, v, dout))
    p = _probs(b, q, k, mask, a)
    bd = ((0, 1), (0, 1))
    dv = b.dot_general(p, dout, ((2,), (2,)), bd)
    dp = b.dot_general(dout, v, ((3,), (3,)), bd)
    ds = b.binary("mul", p, b.binary("sub", dp, b.reduce("sum", b.binary("mul", dp, p), (3,),
                                                         keepdims=True)))
    ds = b.binary("mul", ds, b.scalar(a["scale"], ds))
    dq = b.dot_general(ds, k, ((3,), (2,)), bd)
    dk = b.dot_general(ds, q, ((2,), (2,)), bd)
    return tuple(_bhsd(b, t, lay) for t in (dq, dk, dv))


# ---- rope: the formulas of nn/rotary.py, operation for operation ----
decomp(K.Rope)(lambda b, node, *ops: inline(b, rope_ref, ops, **node.attrs))
decomp(K.RopeBackward)(lambda b, node, *ops: inline(b, rope_backward_ref, ops, **node.attrs))
