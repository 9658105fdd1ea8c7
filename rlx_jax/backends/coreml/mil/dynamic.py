"""Symbolic dimensions inside a MIL program: a flexible model input (RangeDim, EnumeratedShapes)
has sizes known only when it runs, so every shape the program computes from them is computed
in the program, with MIL's `shape` and int32 ops.

Each symbol's size is read once at the function's entry from the first input that has it as a
dimension (`shape` then `slice_by_index`: an int32[1] var); a dimension expression is evaluated
by jax.export's own evaluator (`_DimExpr._evaluate`) over `MilDim`s, whose arithmetic emits MIL
ops, so rlx_jax writes no symbolic algebra. `ints` gives a shape operand: a constant where
every entry is an int, else the int32[K] concat of constant runs and computed sizes.
"""
from collections.abc import Callable
from typing import Any

import numpy as np

from ....errors import RefusalError
from ....ir import dims
from ....ir.ops import OpKind as K


class MilDim:
    """A size computed in the program: an int32[1] MIL var; + - * and divmod emit MIL ops."""

    def __init__(self, ctx, var):
        self.ctx, self.var = ctx, var

    def _other(self, o):
        if isinstance(o, MilDim):
            return o.var
        return np.asarray([int(o)], np.int32)

    def _op(self, name, a, b):
        return MilDim(self.ctx, getattr(self.ctx.mb, name)(x=a, y=b))

    def __add__(self, o):
        return self._op("add", self.var, self._other(o))

    __radd__ = __add__

    def __mul__(self, o):
        return self._op("mul", self.var, self._other(o))

    __rmul__ = __mul__

    def __sub__(self, o):
        return self._op("sub", self.var, self._other(o))

    def __rsub__(self, o):
        return self._op("sub", self._other(o), self.var)

    def __neg__(self):
        return self._op("mul", self.var, np.asarray([-1], np.int32))

    def __divmod__(self, o):
        return (self._op("floor_div", self.var, self._other(o)),
                self._op("mod", self.var, self._other(o)))

    def __rdivmod__(self, o):
        return (self._op("floor_div", self._other(o), self.var),
                self._op("mod", self._other(o), self.var))


class _Env(dict):
    """symbol name -> MilDim, refusing a symbol no model input has as a dimension."""

    def __missing__(self, name):
        raise RefusalError(
            f"the symbolic dimension '{name}' is no model input's dimension, so the program "
            f"cannot read its size; give some argument a dimension that is exactly {name}")


def read_symbols(ctx, graph, inputs):
    """ctx.symbols: each symbol of the graph inputs' shapes -> its size as an int32[1] var,
    read from the first input (MIL var in `inputs`) that has it as a plain dimension."""
    mb = ctx.mb
    for v, var in zip(graph.inputs, inputs):
        for axis, d in enumerate(v.shape):
            name = dims.plain_symbol(d)
            if name is not None and name not in ctx.symbols:
                ctx.symbols[name] = mb.slice_by_index(x=mb.shape(x=var), begin=[axis],
                                                      end=[axis + 1])


def size(ctx, d):
    """Dimension `d` as an int32[1] MIL var (an int as a constant)."""
    if not dims.is_symbolic(d):
        return np.asarray([int(d)], np.int32)
    env = _Env({name: MilDim(ctx, var) for name, var in ctx.symbols.items()})
    got = d._evaluate(env)
    return got.var if isinstance(got, MilDim) else np.asarray([int(got)], np.int32)


def ints(ctx, xs):
    """A shape-like int32[K] operand: constant when every entry is an int."""
    xs = list(xs)
    if not any(dims.is_symbolic(x) for x in xs):
        return np.asarray(xs, dtype=np.int32)
    parts, run = [], []
    for x in xs:
        if dims.is_symbolic(x):
            if run:
                parts.append(np.asarray(run, np.int32))
                run = []
            parts.append(size(ctx, x))
        else:
            run.append(int(x))
    if run:
        parts.append(np.asarray(run, np.int32))
    return parts[0] if len(parts) == 1 else ctx.mb.concat(values=parts, axis=0)


def mil_shape(shape, symbols):
    """A placeholder shape for MIL: each plain symbol a MIL symbol (one per name, kept in
    `symbols`); a compound dimension of an input is refused."""
    from coremltools.converters.mil.mil import get_new_symbol
    out = []
    for d in shape:
        if not dims.is_symbolic(d):
            out.append(int(d))
            continue
        name = dims.plain_symbol(d)
        if name is None:
            raise RefusalError(
                f"a model input dimension is the expression '{d}'; a flexible Core ML input "
                f"takes one symbol per dimension (declare it as a plain symbol)")
        if name not in symbols:
            symbols[name] = get_new_symbol()
        out.append(symbols[name])
    return tuple(out)


# The kinds whose MIL rules take symbolic dimensions (their shape operands through `ints` and
# `size`; with a predicate: on the nodes it accepts), each exercised by tests/test_symbolic*.py
# (a transformer block and its gradient, a CNN, small programs); a node of any other kind with a
# symbolic dimension is refused by name (on the host with fallback="host", or each size gets a
# program of its own under rlx_jax.jit(polymorphic_shapes=...)).
def _unmasked(node):
    """Attention without a causal or bool mask (those are built as constants of the sizes)."""
    return not node.attrs["causal"] and node.attrs["mask_kind"] in ("none", "additive")


SYMBOLIC_KINDS: dict[K, Callable[[Any], bool] | None] = {k: None for k in (
    K.Constant, K.Activation, K.Binary, K.Compare, K.Where, K.Cast, K.MatMul, K.DotGeneral,
    K.Reduce, K.Reshape, K.Transpose, K.Expand, K.DimSize, K.Softmax, K.LogSoftmax,
    K.LayerNorm, K.LayerNormBackwardInput, K.LayerNormBackwardGamma, K.Conv, K.Pool,
    K.Concat, K.Cumsum, K.Reverse)}
SYMBOLIC_KINDS.update({K.Attention: _unmasked, K.AttentionBackward: _unmasked})


class SymbolicRules:
    """A view of a rule table refusing, on nodes with a symbolic dimension, the kinds outside
    SYMBOLIC_KINDS."""

    def __init__(self, rules):
        self.rules = rules

    def get(self, kind):
        rule = self.rules.get(kind)
        if rule is None or (kind in SYMBOLIC_KINDS and SYMBOLIC_KINDS[kind] is None):
            return rule
        accepts = SYMBOLIC_KINDS.get(kind) or (lambda node: False)

        def guarded(ctx, node, *args):
            if not accepts(node) and any(dims.symbolic_shape(v.shape)
                                         for v in (*node.inputs, *node.outputs)):
                raise RefusalError(
                    f"Core ML's lowering of {kind.name} takes static sizes only (its rule "
                    f"computes with them), and this node has symbolic dimensions; give them "
                    f"static sizes, or use backend='mlx' or 'xla'")
            return rule(ctx, node, *args)
        guarded.__wrapped__ = getattr(rule, "__wrapped__", rule)
        return guarded
