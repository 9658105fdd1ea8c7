"""Constant folding: a program's computations that read no argument are evaluated once, at
compile time, by JAX on the CPU (the `xla` reference), and become constants of the program.

XLA folds such computations in `jax.jit` too, and coremltools' `const_elimination` does in a
Core ML model: the device then runs only what depends on the arguments, and every call saves
the work. Evaluating them with JAX itself also gives the values `jax.jit` gives: a table
built from `iota` through `lgamma` and `exp` (`jax.scipy.linalg.pascal`, `invhilbert`), a DFT
matrix or a causal mask is the array JAX computes, not a rounding of the backend's own
`lgamma`.

A top-level node folds when every operand is a constant or a folded value, it has no regions
(control flow stays as it is) and no control-flow node reads its results (a loop's operands
are left as the program computes them: folding those of `jax.random.gamma`'s rejection loop
moved one of 21 Core ML samples one ulp from JAX's), it is not a collective, a host primitive
or a symbolic size (`NOT_FOLDED`), and each of its results is a plain array (no PRNG key, no
float0) of at most `FOLD_ELEMENTS` elements with a static shape: folding never turns a cheap
broadcast into a large constant of the program. The folded values read by the rest of the
program (or returned) are computed by one JAX program over the folded subgraph and replace
their nodes as Constants; the folded nodes are listed in the Placement (`Placement.folded`), and
`rlx_jax.jit(..., fold_constants=False)` keeps them on the device.
"""
import jax
import numpy as np

from ..ir.graph import Builder, Graph, Node
from ..ir.ops import OpKind as K
from ..ir.rewrite import copy_node, dce, rewrite

FOLD_ELEMENTS = 1 << 16
NOT_FOLDED = frozenset({K.Input, K.Constant, K.HostPrimitive, K.DimSize, K.AllReduce,
                        K.AllGather, K.ReduceScatter, K.AxisIndex, K.Ppermute})


def _plain(v):
    """Whether value v can be a Constant: a static shape of at most FOLD_ELEMENTS elements and
    an array dtype numpy holds (not a PRNG key, not float0)."""
    if not all(isinstance(d, (int, np.integer)) for d in v.shape):
        return False
    dtype = np.dtype(v.dtype) if not jax.dtypes.issubdtype(v.dtype, jax.dtypes.extended) \
        else None
    return dtype is not None and dtype != jax.dtypes.float0 and \
        int(np.prod(v.shape, dtype=np.int64)) <= FOLD_ELEMENTS


def foldable(graph):
    """The top-level nodes of `graph` that fold (see the module docstring), in order."""
    const = {n.out.id for n in graph.nodes if n.kind is K.Constant}
    looped = {v.id for n in graph.nodes if n.regions for v in n.inputs}
    out = []
    for n in graph.nodes:
        if n.kind in NOT_FOLDED or n.regions or not n.outputs or \
                any(o.id in looped for o in n.outputs):
            continue
        if all(v.id in const for v in n.inputs) and all(_plain(o) for o in n.outputs):
            out.append(n)
            const.update(o.id for o in n.outputs)
    return out


def _evaluate(graph, nodes, wanted):
    """{value id: numpy array} of the `wanted` outputs of folded `nodes`, from one JAX program
    over them (the xla reference backend, as host segments run)."""
    from ..backends.base import all_backends, kept_kinds
    from ..passes.legalize import legalize
    b = Builder(Graph(f"{graph.name}.folded"))
    env = {}
    for n in nodes:
        for v in n.inputs:
            if v.id not in env:                  # a Constant of the program
                env[v.id] = copy_node(b, v.node, [])[0]
        for o, new in zip(n.outputs, copy_node(b, n, [env[v.id] for v in n.inputs])):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in wanted]
    xla = all_backends()["xla"]
    got = xla.lower(legalize(b.graph, kept_kinds(xla), backend="xla"))()
    return {v.id: np.asarray(a) for v, a in zip(wanted, got)}


def fold_constants(graph: Graph) -> tuple[Graph, list[Node]]:
    """(`graph` with its foldable nodes replaced by the Constants of their values, the folded
    nodes); `graph` itself when none folds."""
    nodes = foldable(graph)
    if not nodes:
        return graph, []
    folded = {id(n) for n in nodes}
    read = {v.id for n in graph.nodes if id(n) not in folded for v in n.inputs} | \
        {v.id for v in graph.outputs}
    needed = [n for n in nodes if any(o.id in read for o in n.outputs)]
    values = _evaluate(graph, nodes, [o for n in needed for o in n.outputs])

    def replace(b, n, ins):
        if n.outputs and n.outputs[0].id in values:
            outs = tuple(b.const(values[o.id], o.dtype) for o in n.outputs)
            return outs[0] if len(outs) == 1 else outs
        return None
    new, _ = rewrite(graph, replace, "folding constants")
    return dce(new).verify(), nodes
