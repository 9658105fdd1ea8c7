"""IR Graph -> a Python function over mx arrays (the interpreter loop over MLX_RULES), wrapped
by the runtime in `mx.compile`. MLX_RULES (table.py) holds one rule per claimed OpKind, filled by
the rules_* families imported here."""
import io
import re

import mlx.core as mx
import numpy as np

from ...errors import RefusalError
from ...ir.interpret import interpret, where
from ...ir.ops import OpKind
from . import rules_conv, rules_control, rules_elementwise, rules_index, rules_nn  # noqa: F401
from . import rules_collectives, rules_optim, rules_reduce, rules_shape  # noqa: F401
from . import prepack, rules_quant  # noqa: F401
from . import rules_rnn  # noqa: F401
from . import rules_xent  # noqa: F401
from . import rules_sgd  # noqa: F401
from . import complex_values, rules_linalg
from ...placement.partition import value_reasons
from .rules_control import has_host, plan
from .segments import segmented
from .runtime import NP_TO_MX, MlxExecutable, compile_unavailable_reason, to_mx_dtype
from .table import MLX_RULES


SMALL_CONSTANT = 16


class MlxContext:
    """What rules see: the graph's constants, and `run(region, args)` / `function(region)` for
    control flow (rules_control.py). Large constants, regions' included, are converted once at
    lowering time and captured; small ones are made while mx.compile traces, so they become
    literals of the fused kernels instead of extra arguments of every call (measured: ~4 us per
    call). `compile`: region functions are mx.compile'd (and a graph with host loops is cut
    into compiled segments); `program`: tracing for build_program, nothing is evaluated."""

    def __init__(self, graph, compile=False, program=False, prepacked=frozenset()):
        self.consts = {}
        for n in graph.walk():
            if n.kind is OpKind.Constant and n.out.size > SMALL_CONSTANT:
                self.consts[id(n)] = mx.array(n.attrs["value"], dtype=to_mx_dtype(n.out.dtype))
        self.compile, self.program = compile, program
        self.prepacked = prepacked      # DequantMatMul nodes given packed weights (prepack.py)
        self.extra = []          # values build_program exports besides the outputs
        self._functions = {}

    def constant(self, node):
        c = self.consts.get(id(node))
        if c is None:
            return mx.array(node.attrs["value"], dtype=to_mx_dtype(node.out.dtype))
        return c

    def alias(self, copy, node):
        """`copy` (a Constant copied into a segment) stands for `node`."""
        if id(node) in self.consts:
            self.consts[id(copy)] = self.consts[id(node)]

    def run(self, region, args):
        """The region's outputs on `args`, its nodes lowered in place (inlined into the caller)."""
        return interpret(region, MLX_RULES, args, self, backend="mlx")

    def function(self, region):
        """The region as a function of mx arrays returning its outputs: mx.compile'd when this
        context compiles (in compiled segments when it holds host loops), else eager. Made once
        per region."""
        fn = self._functions.get(id(region))
        if fn is None:
            fn = self._functions[id(region)] = self._make_function(region)
        return fn

    def _make_function(self, region):
        def run(*args):
            return self.run(region, args)
        if not self.compile:
            return run
        if has_host(region):
            return segmented(region, self, mx.compile)
        return mx.compile(run)


def check_dtypes(graph):
    """Every value's dtype must exist in MLX on the default device (float64: CPU only)."""
    for v in graph.inputs:
        if np.dtype(v.dtype) not in NP_TO_MX:
            raise RefusalError(
                f"argument {v.node.attrs['index']} of '{graph.name}' has dtype {v.dtype.name}, "
                f"which backend 'mlx' does not support; pass float32/float16/bfloat16/int/uint/"
                f"bool arrays, or use backend='xla'")
    for n, v, why in dtype_problems(graph):
        raise RefusalError(f"{why}: `{n.text()}`{where(n)}. Use float32 (disable "
                            f"jax_enable_x64 or cast), or backend='xla'.")


def dtype_problems(graph):
    """(node, value, why) for every value (regions' too) whose dtype MLX lacks on the default
    device."""
    gpu = mx.default_device() != mx.cpu
    for n in graph.walk():
        for v in n.outputs:
            if np.dtype(v.dtype) not in NP_TO_MX:
                yield n, v, f"backend 'mlx' has no {v.dtype.name} values"
            elif gpu and v.dtype == np.float64:
                yield n, v, "backend 'mlx' has no float64 on the GPU (Metal)"


def node_reasons(graph):
    """{id(top-level node): reason} of the nodes (regions' included, charged to their
    top-level node) MLX has no kernel for in this variant: linear algebra attributes
    (rules_linalg.host_reason) and ops on complex64 (complex_values.host_reason)."""
    bad = {}
    for n in graph.nodes:
        for m in n.walk():
            why = rules_linalg.host_reason(m) or complex_values.host_reason(m)
            if why is not None:
                inner = "" if m is n else f" (inside {n.kind.name}" + \
                    (f" at {m.src})" if m.src else ")")
                bad.setdefault(id(n), why + inner)
    return bad


def host_reasons(graph, known):
    """{id(node): reason} of the top-level nodes whose values (or operands) have a dtype MLX
    lacks here, or that MLX has no kernel for (node_reasons): they run on the host
    (placement/plan.py)."""
    bad = value_reasons(graph, dtype_problems(graph))
    for k, why in node_reasons(graph).items():
        bad.setdefault(k, why)
    return {k: why for k, why in bad.items() if k not in known}


def build_function(graph, compile=False, program=False, prepacked=frozenset()):
    """The graph as a Python function of mx arrays returning the list of outputs, and its
    context. With `compile`, a graph without host loops is returned as it is (the executable
    mx.compiles it whole); one with host loops comes back cut into compiled segments.
    `prepacked`: the DequantMatMul nodes whose weights the function receives packed."""
    ctx = MlxContext(graph, compile=compile, program=program, prepacked=prepacked)
    if compile and has_host(graph):
        return segmented(graph, ctx, mx.compile), ctx

    def run(*args):
        return interpret(graph, MLX_RULES, args, ctx, backend="mlx")
    return run, ctx


def lower(graph, name=None, compile=True):
    """The executable. `.plan`: how each control-flow node lowers (rules_control.plan);
    `.segments`: for a graph with host loops, its top-level runs ("compiled" / "host")."""
    check_dtypes(graph)
    compiled = None
    if compile and has_host(graph) and compile_unavailable_reason() is None:
        compiled, _ = build_function(graph, compile=True)
        eager = _lazy(graph)           # the fallback, its constants converted only if needed
        groups = []
    else:                              # argument weights of DequantMatMul: packed once each
        groups, prepacked = prepack.plan(graph)
        eager, _ = build_function(graph, prepacked=prepacked)
    dtypes = [v.dtype for v in graph.inputs]
    exe = prepack.PackingExecutable(name or graph.name, eager, dtypes, groups, compile=compile) \
        if groups else MlxExecutable(name or graph.name, eager, dtypes, compile=compile,
                                     compiled_fn=compiled)
    exe.plan = plan(graph)
    exe.segments = getattr(compiled, "segments", None) if exe.compiled else None
    return exe


def _lazy(graph):
    made = []

    def run(*args):
        if not made:
            made.append(build_function(graph)[0])
        return made[0](*args)
    return run


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
    fn, ctx = build_function(graph, program=True)
    outs = fn(*args)
    buf = io.StringIO()
    mx.export_to_dot(buf, *outs, *ctx.extra)
    return MlxProgram(buf.getvalue())
