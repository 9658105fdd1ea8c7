"""Which top-level nodes of a legalized graph Core ML cannot run (the partitioner's question).

A node goes to the host when a value it computes, in itself or in its regions, has no Core ML
type (legality.problems: bfloat16, float64, integers not provably in int32 range, rank > 5),
when it reads such a value, or when its MIL rule refuses its configuration (bitwise ops, an
integer convolution, ...). The last is found by building the program once with every rule:
a node whose rule raises a RefusalError (a documented refusal) records why and leaves a
stand-in of its output type (a constant, or for a large one a tile of the probe's own input,
so that coremltools computes no value of that size), so one build names every refusal. Any
other exception in a rule is a bug and surfaces as a LoweringError naming the node, its line
and the rule. Zero-size top-level values are folded away before lowering (passes/empty.py)
and are not reasons.
"""
import numpy as np

from ....errors import RefusalError
from ....ir.dims import is_symbolic, symbolic_shape
from ....ir.interpret import interpret
from ....placement.partition import value_reasons
from ..mil.legality import MIL_DTYPES, mil_dtype_name, mil_np_dtype, mil_type, problems
from ..package.cache import MIL_LOCK
from ..mil.dynamic import SymbolicRules, mil_shape, read_symbols
from ..mil.table import MIL_RULES, MilCtx


def host_reasons(graph, known, opset):
    """{id(node): reason} for the top-level nodes Core ML cannot run, besides `known` (the
    nodes already bound for the host)."""
    top = {id(n) for n in graph.nodes}
    bad = value_reasons(graph, ((m, v, why) for v, m, why, _todo in problems(graph)
                                if not (0 in v.shape and id(m) in top)))
    bad.update(_refused(graph, set(known) | set(bad), opset))
    return {k: why for k, why in bad.items() if k not in known}


class _Tolerant:
    """MIL_RULES seen through a probe: a skipped or refusing node yields stand-ins."""

    def __init__(self, skip):
        self.skip, self.refused, self.seed = skip, {}, None

    def get(self, kind):
        rule = SymbolicRules(MIL_RULES).get(kind)

        def run(ctx, node, *args):
            if rule is None and id(node) not in self.skip:
                self.refused[id(node)] = f"no MIL rule for {node.kind.name}"
            elif id(node) not in self.skip and not _empty(node):
                try:
                    return rule(ctx, node, *args)
                except RefusalError as e:     # only a documented refusal; a bug surfaces
                    self.refused[id(node)] = str(e).split("\n")[0].split("; use backend")[0]
            outs = [_stand_in(ctx, o, self.seed) for o in node.outputs]
            return outs[0] if len(outs) == 1 else tuple(outs)
        run.__wrapped__ = rule
        return run


def _empty(node):
    """Zero-size operands or results: folded away before lowering (passes/empty.py), not probed."""
    return any(0 in v.shape for v in node.inputs + node.outputs)


def _mil_dtype(v):
    dt = mil_np_dtype(v.dtype)
    return dt if dt in MIL_DTYPES else np.dtype(np.float32)


def _stand_in(ctx, v, seed):
    """A var of v's shape and MIL dtype; a large one tiled from the probe's own float32[1] input
    `seed`, which has no value, so coremltools computes nothing of that size."""
    shape = tuple(_at_least_1(d) for d in v.shape)
    if symbolic_shape(shape):            # sized in the program (mil/dynamic.py)
        fill = ctx.mb.fill(shape=ctx.ints(shape), value=np.float32(0))
        return ctx.mb.cast(x=fill, dtype=mil_dtype_name(_mil_dtype(v))) \
            if _mil_dtype(v) != np.float32 else fill
    if int(np.prod(shape, dtype=np.int64)) <= 4096:
        return ctx.const(np.zeros(shape, _mil_dtype(v)))
    one = ctx.mb.reshape(x=seed, shape=ctx.ints((1,) * len(shape)))
    big = ctx.mb.tile(x=one, reps=ctx.ints(shape))
    return ctx.mb.cast(x=big, dtype=mil_dtype_name(_mil_dtype(v))) \
        if _mil_dtype(v) != np.float32 else big


def _refused(graph, skip, opset):
    """{id(node): reason} of the top-level nodes whose MIL rule refuses them."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function
    rules = _Tolerant(skip)
    names = [f"input_{i}" for i in range(len(graph.inputs))]
    symbols = {}         # symbolic dimensions (a flexible program): MIL symbols, as build's
    specs = {name: mb.TensorSpec(shape=mil_shape(tuple(_at_least_1(d) for d in v.shape),
                                                 symbols) or (1,),
                                 dtype=mil_type(_mil_dtype(v)))
             for name, v in zip(names, graph.inputs)}
    specs["rlx_stand_in_seed"] = mb.TensorSpec(shape=(1,), dtype=mil_type(np.dtype(np.float32)))
    ctx = MilCtx(mb, opset)
    with MIL_LOCK:
        with Function(specs, opset_version=opset) as func:
            rules.seed = func.inputs["rlx_stand_in_seed"]
            args = []
            for name, v in zip(names, graph.inputs):
                var = func.inputs[name]
                args.append(mb.reshape(x=var, shape=np.zeros((0,), np.int32))
                            if not v.shape else var)
            read_symbols(ctx, graph, [func.inputs[n] for n in names])
            interpret(graph, rules, args, ctx, backend="coreml")
    return rules.refused


def _at_least_1(d):
    return d if is_symbolic(d) else max(d, 1)
