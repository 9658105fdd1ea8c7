"""complex64 values on Core ML as pairs of float32 values (re, im).

MIL has no complex tensors. `split_complex` rewrites every node on complex64 values that has
a real form into float32 nodes on the (re, im) parts of its operands: Fft as DFT matmuls
(passes/complex_dft.py), Complex / Real / Imag / Conjugate, Binary add / sub / mul / div (Smith's
division), Activation neg / abs (hypot-scaled, as XLA) / square / integer_pow (y >= 1),
Compare eq / ne, Cast from and to complex64, complex Constants, DotGeneral / MatMul (four
real products), Reduce sum, Scatter (replace, add) and the data-movement kinds
(passes/complex_rules.py: applied to each part). An imaginary part known to be zero (a real value
cast to complex, a constant with no imaginary part, an rfft's input) is carried as None, so
it costs no ops.

Each rewritten node's complex result is re-formed by a Complex node (Cast for a zero
imaginary part) that only the nodes left complex read: what has no real form, and the
program's complex results. Those, and the Real / Imag parts of complex program arguments,
are the only complex64 values left; they run on the host (Core ML has no complex64 tensors)
and the partitioner carries the float32 parts across. Unread ones are dropped.

Given / Result (`jnp.abs(jnp.fft.rfft(x)) ** 2`, x: f32[2, 16]):
    b:complex64[2,9] = Fft[fft_type=rfft, fft_lengths=(16,)] x;  c:f32[2,9] = Activation[abs] b
    ->  re = MatMul x A;  im = MatMul x B;  c = m * sqrt(1 + (n / m)²)
        (m, n = max, min of |re|, |im|; n / m taken as 1 where n == m): all float32, no host op
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....ir.rewrite import dce, rewrite
from .complex_dft import too_long
from .complex_rules import RULES

# Kinds no MIL rule lowers that this rewrite turns into supported kinds where it can (the
# backend's REWRITTEN_OPS); the rest run on the host.
REWRITTEN = frozenset({K.Fft, K.Complex, K.Real, K.Imag, K.Conjugate})

C64 = np.dtype(np.complex64)
F32 = np.dtype(np.float32)


def is_complex(v):
    return v.dtype == C64


class ComplexPairs:
    """The pair algebra of one rewrite: new complex64 value id -> (re, im or None), the
    Real / Imag parts taken of complex values no rule rewrote, and the constants per graph."""

    def __init__(self):
        self.pairs, self.consts = {}, {}

    # ---- pairs of values ----
    def of(self, b, v):
        """The (re, im) pair of complex operand `v` (a real one: (v as float32, None))."""
        if not is_complex(v):
            return (b.cast(v, F32), None)
        if v.id not in self.pairs:
            self.pairs[v.id] = (b.add(K.Real, (v,)), b.add(K.Imag, (v,)))
        return self.pairs[v.id]

    def join(self, b, pair, shape):
        """The complex64 value of `pair`, remembered as its pair (re-formed on the host when a
        node left complex reads it)."""
        re, im = (self.fit(b, x, shape) if x is not None else None for x in pair)
        v = b.cast(re, C64) if im is None else b.add(K.Complex, (re, im))
        self.pairs[v.id] = (re, im)
        return v

    @staticmethod
    def fit(b, x, shape):
        """x broadcast to `shape` (operands of elementwise nodes broadcast)."""
        return x if x.shape == tuple(shape) else b.expand(x, shape)

    def zeros(self, b, shape):
        return b.expand(self.constant(b, ("zero",), lambda: np.zeros((), F32)), shape)

    def part(self, b, pair, i, shape):
        """Part i of `pair`, zeros of `shape` for a None imaginary part."""
        return pair[i] if pair[i] is not None else self.zeros(b, shape)

    def constant(self, b, key, make):
        """One Constant node per graph and key (`make()` gives its value, or a tuple)."""
        full = (id(b.graph),) + tuple(key)
        if full not in self.consts:
            value = make()
            self.consts[full] = (tuple(b.const(v) for v in value) if isinstance(value, tuple)
                                 else b.const(value))
        return self.consts[full]

    @staticmethod
    def ndim(pair):
        return pair[0].ndim

    @staticmethod
    def transpose(b, pair, perm):
        return tuple(None if x is None else b.transpose(x, perm) for x in pair)

    # ---- real arithmetic with None as zero ----
    @staticmethod
    def add(b, x, y):
        return y if x is None else x if y is None else b.binary("add", x, y)

    @staticmethod
    def sub(b, x, y):
        return x if y is None else b.unary("neg", y) if x is None else b.binary("sub", x, y)

    @staticmethod
    def mul(b, x, y):
        return None if x is None or y is None else b.binary("mul", x, y)

    @staticmethod
    def neg(b, x):
        return None if x is None else b.unary("neg", x)

    # ---- complex arithmetic on pairs ----
    def cmul(self, b, x, y, op=None):
        """x * y; `op(b, u, v)` multiplies the parts (default: elementwise)."""
        op = op or self.mul
        re = self.sub(b, op(b, x[0], y[0]), op(b, x[1], y[1]))
        return re, self.add(b, op(b, x[0], y[1]), op(b, x[1], y[0]))

    def matmul(self, b, x, w):
        """x @ w for pairs, w a pair of 2-D float32 matrices (MatMul on the last axis)."""
        return self.cmul(b, x, w, lambda b, u, v: None if u is None or v is None
                         else b.add(K.MatMul, (u, v)))

    def cdiv(self, b, x, y):
        """x / y by Smith's algorithm (no overflow of |y|²), as XLA divides complex values."""
        if y[1] is None:
            return b.binary("div", x[0], y[0]), (None if x[1] is None
                                                 else b.binary("div", x[1], y[0]))
        c, d = y
        big = b.compare("ge", b.unary("abs", c), b.unary("abs", d))
        one = (b.binary("div", d, c), c, d)           # |c| >= |d|: r = d / c
        two = (b.binary("div", c, d), d, c)           # otherwise:  r = c / d
        outs = []
        for r, p, q in (one, two):
            den = b.binary("add", p, b.binary("mul", q, r))
            if p is c:
                re, im = self.add(b, x[0], self.mul(b, x[1], r)), self.sub(b, x[1],
                                                                           self.mul(b, x[0], r))
            else:
                re, im = self.add(b, b.binary("mul", x[0], r), x[1]), \
                    self.sub(b, self.mul(b, x[1], r), x[0])
            outs.append((b.binary("div", re, den), b.binary("div", im, den)))
        return tuple(b.where(big, u, v) for u, v in zip(*outs))

    def cabs(self, b, x):
        """|x| as XLA computes it: m * sqrt(1 + (n/m)²), m = max(|re|, |im|), n = min, with
        n/m taken as 1 where n == m (zeros and infinities)."""
        if x[1] is None:
            return b.unary("abs", x[0])
        ar, ai = b.unary("abs", x[0]), b.unary("abs", x[1])
        m, n = b.binary("max", ar, ai), b.binary("min", ar, ai)
        one = b.expand(self.constant(b, ("one",), lambda: np.ones((), F32)), m.shape)
        q = b.where(b.compare("eq", n, m), one, b.binary("div", n, m))
        root = b.unary("sqrt", b.binary("add", one, b.binary("mul", q, q)))
        return b.binary("mul", m, root)


def split_complex(graph):
    """`graph` with its complex64 nodes that have a real form done on (re, im) float32 pairs
    (see the module docstring); the same graph when it holds no complex64 value."""
    if not any(is_complex(v) for n in graph.walk() for v in list(n.inputs) + list(n.outputs)):
        return graph
    algebra = ComplexPairs()

    def rule(b, n, ins):
        if len(n.outputs) != 1:
            return None
        if not (is_complex(n.out) or any(is_complex(v) for v in ins)):
            return None
        fn = RULES.get(n.kind)
        if fn is None or (n.kind is K.Fft and too_long(n)):
            return None
        res = fn(algebra, b, n, ins)
        if res is None or not isinstance(res, tuple):
            return res
        return algebra.join(b, res, n.out.shape)
    g, _ = rewrite(graph, rule, "split_complex")
    return dce(g).verify()


def boundary_reasons(graph):
    """{id(node): reason} of the top-level complex nodes `split_complex` left: Ffts above the
    length limit, and the conversions between complex64 values and their float32 parts where
    the program's complex values begin or end (its arguments and results, ops with no real
    form)."""
    out = {}
    for n in graph.nodes:
        if n.kind is K.Fft and too_long(n):
            out[id(n)] = too_long(n)
        elif n.kind is K.Complex:
            out[id(n)] = ("Core ML has no complex64 tensors: it forms a complex64 value from "
                          "float32 (re, im) parts for a program result or an op with no real "
                          "form")
        elif n.kind in (K.Real, K.Imag) and is_complex(n.inputs[0]):
            out[id(n)] = ("Core ML has no complex64 tensors: it takes a float32 part of a "
                          "complex64 program argument or of an op with no real form")
    return out
