"""Estimates from the IR that `Compiled.cost_analysis()` and `Compiled.memory_analysis()`
report, counted over the legalized graph (what the backend runs, host segments included):

- flops: `DotGeneral` / `MatMul` 2 × output elements × contracted size; `Conv` 2 × output
  elements × (weight elements / output features); elementwise kinds (`Activation`, `Binary`, `Compare`, `Where`, `Cast`) 1 per output element;
  reductions and scans (`Reduce`, `ArgMax`, `ArgMin`, `Cumsum`, `CumProd`, `CumMax`, `Pool`) 1 per
  input element; data movement (reshape, transpose, slices, concatenation, gathers, scatters,
  broadcasts) 0; any other kind 1 per output element.
- bytes accessed: for every node but the boundary (`Input`, `Constant`), the bytes of its
  operands plus the bytes of its results, as XLA's cost analysis counts them.
- Control flow (`If`, `While`, `Scan`): the node's own operands and results, plus its regions
  counted once each (trip counts and taken branches are not known statically).
- memory: arguments (the graph inputs), outputs (the graph outputs), temporaries (every other
  node result, with no buffer reuse: an upper bound), constants (`Constant` nodes); aliasing is
  never done (`donate_argnums` is accepted and not acted on), so `alias_size_in_bytes` is 0.
"""
import dataclasses

import numpy as np

from .ir.ops import OpKind as K

_BOUNDARY = {K.Input, K.Constant}
_ELEMENTWISE = {K.Activation, K.Binary, K.Compare, K.Where, K.Cast}
_PER_INPUT = {K.Reduce, K.ArgMax, K.ArgMin, K.Cumsum, K.CumProd, K.CumMax, K.Pool}
_MOVEMENT = {K.Reshape, K.Transpose, K.Narrow, K.Concat, K.Expand, K.Reverse, K.Gather,
             K.ScatterAdd, K.Scatter, K.Slice, K.Pad, K.DynamicSlice, K.DynamicUpdateSlice,
             K.Iota, K.Bitcast}


@dataclasses.dataclass(frozen=True)
class MemoryAnalysis:
    """Bytes of a compiled program's values, from the IR (see the module docstring)."""
    argument_size_in_bytes: int
    output_size_in_bytes: int
    temp_size_in_bytes: int
    constant_size_in_bytes: int
    alias_size_in_bytes: int = 0


def node_flops(node):
    kind, outs = node.kind, node.outputs
    out_elems = sum(o.size for o in outs)
    if kind in _BOUNDARY or kind in _MOVEMENT or node.regions:
        return 0
    if kind is K.DotGeneral:
        (lhs_c, _), _ = node.attrs["dimension_numbers"]
        return 2 * out_elems * int(np.prod([node.inputs[0].shape[d] for d in lhs_c]))
    if kind is K.MatMul:
        return 2 * out_elems * node.inputs[0].shape[-1]
    if kind is K.Conv:
        w = node.inputs[1]
        out_features = w.shape[node.attrs["dimension_numbers"][1][0]]
        return 2 * out_elems * (w.size // max(out_features, 1))
    if kind in _PER_INPUT:
        return node.inputs[0].size
    return out_elems


def _node_bytes(node):
    if node.kind in _BOUNDARY:
        return 0
    return sum(v.nbytes for v in node.inputs) + sum(v.nbytes for v in node.outputs)


def cost_analysis(graph) -> dict[str, float]:
    """{"flops", "bytes accessed"} of `graph`, regions included (each once)."""
    flops = nbytes = 0
    for node in graph.walk():
        flops += node_flops(node)
        nbytes += _node_bytes(node)
    return {"flops": float(flops), "bytes accessed": float(nbytes)}


def memory_analysis(graph) -> MemoryAnalysis:
    outputs = {v.id for v in graph.outputs}
    temp = const = 0
    for node in graph.walk():
        if node.kind is K.Constant:
            const += sum(o.nbytes for o in node.outputs)
        elif node.kind not in _BOUNDARY:
            temp += sum(o.nbytes for o in node.outputs if o.id not in outputs)
    return MemoryAnalysis(argument_size_in_bytes=sum(v.nbytes for v in graph.inputs),
                          output_size_in_bytes=sum(v.nbytes for v in graph.outputs),
                          temp_size_in_bytes=temp, constant_size_in_bytes=const)
