"""The formulas the decomposition families share, as IR builders: mean, normalization and its
centered gradient, softmax, one-hot, broadcasting helpers, and `inline` (a JAX function traced
into the graph). All are O(1) nodes in tensor sizes.

Operands of Binary/Where broadcast numpy-style at equal rank (size-1 axes): statistics are kept
with `keepdims`, parameter vectors are reshaped to [1, ..., 1, D].
"""
import functools

import jax
import numpy as np

from ...frontend.trace import translate
from ...ir.ops import OpKind as K


def size(x, axes):
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def mean(b, x, axes):
    """Mean over `axes`, keeping them as size 1."""
    axes = tuple(a % x.ndim for a in axes)
    s = b.reduce("sum", x, axes, keepdims=True)
    return b.binary("div", s, b.scalar(size(x, axes), x))


def rows_sum(b, x, keep=1):
    """Sum over every axis but the last `keep` (the parameter gradient of a row-wise op)."""
    return b.reduce("sum", x, tuple(range(x.ndim - keep)))


def vec(b, v, ndim):
    """A trailing-axes parameter reshaped to rank `ndim` for equal-rank broadcasting."""
    return b.reshape(v, (1,) * (ndim - v.ndim) + v.shape)


def lift(b, v, at, ndim):
    """Inserts size-1 axes so v (rank k) lines up with the axes `at` of a rank-`ndim` value."""
    shape = [1] * ndim
    for a, d in zip(at, v.shape):
        shape[a] = d
    return b.reshape(v, shape)


def normalize(b, x, eps, axes=(-1,)):
    """(xhat, r): xhat = (x - mean) * r, r = rsqrt(var + eps) (biased variance over `axes`)."""
    xc = b.binary("sub", x, mean(b, x, axes))
    r = b.unary("rsqrt", b.binary("add", mean(b, b.binary("mul", xc, xc), axes),
                                  b.scalar(eps, x)))
    return b.binary("mul", xc, r), r


def centered_grad(b, g, xhat, r, axes=(-1,)):
    """r · (g - mean(g) - xhat · mean(g · xhat)): the input gradient of a normalization."""
    t = b.binary("sub", g, mean(b, g, axes))
    t = b.binary("sub", t, b.binary("mul", xhat, mean(b, b.binary("mul", g, xhat), axes)))
    return b.binary("mul", r, t)


def softmax(b, x, axis):
    """A Softmax node (kept by backends that claim it, decomposed again otherwise)."""
    return b.add(K.Softmax, (x,), {"axis": axis % x.ndim})


def onehot(b, labels, classes, dtype):
    """[N, C] one-hot of integer labels[N] via Iota + Compare: O(1) nodes in C."""
    ids = b.add(K.Iota, (), {"dtype": labels.dtype, "shape": (1, classes), "dimension": 1})
    hit = b.compare("eq", b.reshape(labels, (labels.shape[0], 1)), ids)
    return b.cast(hit, dtype)


def inline(b, fn, operands, **params):
    """Emits fn(*operands, **params), a jnp function, by translating its jaxpr into `b`; the
    emitted nodes keep the source line of the node being decomposed."""
    structs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in operands]
    closed = jax.make_jaxpr(functools.partial(fn, **params))(*structs)
    src, start = b.src, len(b.graph.nodes)
    outs = translate(closed, b, operands)
    for n in b.graph.nodes[start:]:
        n.src = src
    b.src = src
    return outs[0] if len(outs) == 1 else tuple(outs)
