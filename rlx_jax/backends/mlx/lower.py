"""IR Graph -> a Python function over mx arrays (the interpreter loop over MLX_RULES), wrapped
by the runtime in `mx.compile`. MLX_RULES (table.py) holds one rule per claimed OpKind, filled by
the rules_* families imported here."""
import io
import re

import mlx.core as mx
import numpy as np

from ...errors import LoweringError
from ...ir.interpret import interpret, where
from ...ir.ops import OpKind
from . import rules_conv, rules_elementwise, rules_index, rules_nn, rules_reduce  # noqa: F401
from . import rules_shape  # noqa: F401
from .runtime import NP_TO_MX, MlxExecutable, to_mx_dtype
from .table import MLX_RULES


SMALL_CONSTANT = 16


class MlxContext:
    """What rules see: the graph's constants. Large ones are converted once at lowering time
    and captured; small ones are made while mx.compile traces, so they become literals of the
    fused kernels instead of extra arguments of every call (measured: ~4 us per call)."""

    def __init__(self, graph):
        self.consts = {}
        for n in graph.nodes:
            if n.kind is OpKind.Constant and n.out.size > SMALL_CONSTANT:
                self.consts[id(n)] = mx.array(n.attrs["value"], dtype=to_mx_dtype(n.out.dtype))

    def constant(self, node):
        c = self.consts.get(id(node))
        if c is None:
            return mx.array(node.attrs["value"], dtype=to_mx_dtype(node.out.dtype))
        return c


def check_dtypes(graph):
    """Every value's dtype must exist in MLX on the default device (float64: CPU only)."""
    gpu = mx.default_device() != mx.cpu
    for v in graph.inputs:
        if np.dtype(v.dtype) not in NP_TO_MX:
            raise LoweringError(
                f"argument {v.node.attrs['index']} of '{graph.name}' has dtype {v.dtype.name}, "
                f"which backend 'mlx' does not support; pass float32/float16/bfloat16/int/uint/"
                f"bool arrays, or use backend='xla'")
    for n in graph.nodes:
        for v in n.outputs:
            try:
                dt = to_mx_dtype(v.dtype, f"value of {n.kind.name}")
            except LoweringError as e:
                raise LoweringError(f"{e}\n  in `{n.text()}`{where(n)}") from None
            if gpu and dt == mx.float64:
                raise LoweringError(
                    f"backend 'mlx' has no float64 on the GPU (Metal): `{n.text()}`{where(n)}. "
                    f"Use float32 (disable jax_enable_x64 or cast), or backend='xla'.")


def build_function(graph):
    """The graph as a Python function of mx arrays returning the list of outputs."""
    ctx = MlxContext(graph)

    def run(*args):
        return interpret(graph, MLX_RULES, args, ctx, backend="mlx")
    return run


def lower(graph, name=None, compile=True):
    check_dtypes(graph)
    return MlxExecutable(name or graph.name, build_function(graph),
                         [v.dtype for v in graph.inputs], compile=compile)


class MlxProgram:
    """The MLX primitives a graph lowers to (before mx.compile's fusion), from MLX's own graph
    export: `op_counts()` (primitive name -> count) and `as_text()` (Graphviz DOT)."""

    def __init__(self, dot):
        self.dot = dot
        counts = {}
        for label in re.findall(r'\[label ="([^"]+)"', dot):
            counts[label] = counts.get(label, 0) + 1
        self.counts = dict(sorted(counts.items()))

    def op_counts(self):
        return dict(self.counts)

    def as_text(self):
        return self.dot


def build_program(graph, name=None, **options):
    """Traces the graph lazily on placeholder inputs (nothing is computed) and exports it."""
    check_dtypes(graph)
    args = [mx.zeros(v.shape, to_mx_dtype(v.dtype)) for v in graph.inputs]
    mx.eval(args)
    outs = build_function(graph)(*args)
    buf = io.StringIO()
    mx.export_to_dot(buf, *outs)
    return MlxProgram(buf.getvalue())
