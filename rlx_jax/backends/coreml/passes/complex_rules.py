"""The real forms of the complex64 kinds (passes/complex_pairs.py): RULES[kind](algebra, b, node,
operands) -> a (re, im) pair for a complex64 result, a float32 value for a real one, or None
when the node has no real form here (it stays complex, on the host).

Data movement, sums and scatters (replace, add) act on each part alone (COMPONENTWISE: the node again,
on the real parts, then on the imaginary ones; other operands, indices or predicates, shared).
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....tables import rule_table
from .complex_dft import Dft

C64 = np.dtype(np.complex64)
F32 = np.dtype(np.float32)
RULES, _rule = rule_table("complex rules")


def _pairs(p, b, ins):
    return [p.of(b, v) if v.dtype == C64 else None for v in ins]


COMPONENTWISE = (K.Reshape, K.Transpose, K.Expand, K.Reverse, K.Slice, K.Narrow, K.Concat,
                 K.Pad, K.DynamicSlice, K.DynamicUpdateSlice, K.Where, K.Gather, K.ScatterAdd,
                 K.Scatter, K.Reduce)
LINEAR_FNS = {K.Reduce: ("sum",), K.Scatter: ("replace", "add")}   # the fns acting per part


@_rule(*COMPONENTWISE)
def _componentwise(p, b, n, ins):
    if n.attrs.get("fn") not in LINEAR_FNS.get(n.kind, (None,)) or n.out.dtype != C64:
        return None
    pairs = _pairs(p, b, ins)

    def part(i):
        args = tuple(v if q is None else p.part(b, q, i, v.shape) for v, q in zip(ins, pairs))
        return b.add(n.kind, args, n.attrs, out=[(n.out.shape, F32)])
    zero_im = all(q[1] is None for q in pairs if q is not None)
    return part(0), None if zero_im else part(1)


@_rule(K.Constant)
def _constant(p, b, n, ins):
    value = np.asarray(n.attrs["value"])
    re = b.const(value.real.astype(F32))
    return re, None if not np.any(value.imag) else b.const(value.imag.astype(F32))


@_rule(K.Complex)
def _complex(p, b, n, ins):
    return b.cast(ins[0], F32), b.cast(ins[1], F32)


@_rule(K.Real)
def _real(p, b, n, ins):
    return b.cast(p.of(b, ins[0])[0], n.out.dtype)


@_rule(K.Imag)
def _imag(p, b, n, ins):
    return b.cast(p.part(b, p.of(b, ins[0]), 1, n.out.shape), n.out.dtype)


@_rule(K.Conjugate)
def _conjugate(p, b, n, ins):
    re, im = p.of(b, ins[0])
    return re, p.neg(b, im)


@_rule(K.Cast)
def _cast(p, b, n, ins):
    x = p.of(b, ins[0])                    # a real operand: (it as float32, None)
    if n.out.dtype == C64:
        return x
    if ins[0].dtype == C64 and n.out.dtype.kind == "f":
        return b.cast(x[0], n.out.dtype)   # convert_element_type takes the real part
    return None


def _power(p, b, x, y):
    """x ** y (y >= 1) by repeated squaring, as JAX's integer_pow."""
    acc = None
    while y > 0:
        if y & 1:
            acc = x if acc is None else p.cmul(b, acc, x)
        y >>= 1
        if y > 0:
            x = p.cmul(b, x, x)
    return acc


@_rule(K.Activation)
def _activation(p, b, n, ins):
    fn, x = n.attrs["fn"], p.of(b, ins[0])
    if ins[0].dtype != C64:
        return None
    if fn == "abs":
        return p.cabs(b, x)
    if fn == "neg":
        return p.neg(b, x[0]), p.neg(b, x[1])
    if fn == "square":
        return p.cmul(b, x, x)
    if fn == "integer_pow" and n.attrs.get("y", 0) >= 1:
        return _power(p, b, x, int(n.attrs["y"]))
    return None


@_rule(K.Binary)
def _binary(p, b, n, ins):
    fn = n.attrs["fn"]
    if n.out.dtype != C64 or fn not in ("add", "sub", "mul", "div"):
        return None
    x, y = (p.of(b, v) for v in ins)
    if fn == "add":
        return p.add(b, x[0], y[0]), p.add(b, x[1], y[1])
    if fn == "sub":
        return p.sub(b, x[0], y[0]), p.sub(b, x[1], y[1])
    if fn == "mul":
        return p.cmul(b, x, y)
    return p.cdiv(b, x, y)


@_rule(K.DotGeneral, K.MatMul)
def _contraction(p, b, n, ins):
    if n.out.dtype != C64:
        return None
    attrs = dict(n.attrs)
    if "preferred_element_type" in attrs:
        attrs["preferred_element_type"] = None

    def dot(b, u, v):
        if u is None or v is None:
            return None
        return b.add(n.kind, (u, v), attrs, out=[(n.out.shape, F32)])
    return p.cmul(b, p.of(b, ins[0]), p.of(b, ins[1]), dot)


@_rule(K.Fft)
def _fft(p, b, n, ins):
    return Dft(p, b).lower(n, p.of(b, ins[0]))


@_rule(K.Compare)
def _compare(p, b, n, ins):
    """eq: both parts equal; ne: either part differs (the only comparisons on complex)."""
    fn = n.attrs["fn"]
    if fn not in ("eq", "ne"):
        return None
    x, y = (p.of(b, v) for v in ins)
    both = x[1] is not None or y[1] is not None         # else the imaginary parts are zero
    parts = [b.compare(fn, p.part(b, x, i, ins[0].shape), p.part(b, y, i, ins[1].shape))
             for i in ((0, 1) if both else (0,))]
    return parts[0] if len(parts) == 1 else b.binary("and" if fn == "eq" else "or", *parts)
