"""Zero-size values on Core ML, which has no empty tensors.

JAX programs may take and return empty arrays. Everything about an empty value is known
statically, so before lowering `fold_empty` takes them out of the graph: an empty input is no
model input, a node whose results are all empty is dropped, and a node with a non-empty result
that consumes an empty value is replaced by what that result must be (FOLDS: a reduction over an
empty axis is its identity, a contraction over an empty axis is zeros, a concatenation skips
its empty operands, a pad of nothing is all padding, a scatter of no updates is its operand,
one on an empty index vector scatters at the origin: `_scatter`).
The MIL program never sees a zero-size tensor. Results that are empty, or that fold to
constants, come from the host; when no result needs the device no model is built at all. An
argument returned as it is whose dtype no Core ML tensor holds (a PRNG key's uint32 data) is
handed back by the host the same way, and is no model input when nothing else reads it.

Given / Result (f(x: f32[0,3], y: f32[2,3]) = (sum(x), concat([x, y]), x * 2)):
    model inputs (y); model outputs (y)  -- concat of (empty, y) is y
    host results: sum(x) = 0.0, x * 2 = zeros((0, 3))
"""
import numpy as np

from ....errors import RefusalError
from ....ir.interpret import where
from ....ir.ops import OpKind as K
from ....ir.rewrite import copy_node, dce, rewrite
from ...base import Executable
from ..mil.legality import MIL_DTYPES
from ....ir.identities import identity as init_value
from .empty_control import RECURRENT, fold_recurrent, fold_scan, zero_length


def _concat(b, node, ins, empty):
    live = [x for x, e in zip(ins, empty) if not e]
    return (live[0],) if len(live) == 1 else copy_node(b, node, live)


def _filled(b, node, value):
    out = node.out
    return (b.const(np.full(out.shape, value, out.dtype)),)


def _pad(b, node, ins, empty):
    v, out = ins[1], node.out
    if empty[1] or v.node.kind is not K.Constant:
        return (b.expand(v, out.shape, ()),)
    return _filled(b, node, np.asarray(v.node.attrs["value"]))


CONTRACTIONS = (K.DotGeneral, K.MatMul, K.Conv, K.Conv2dBackwardInput, K.Conv2dBackwardWeight)
FOLDS = {  # kind -> fold(builder, node, new operands, which operands are empty) for a non-empty
    K.Concat: _concat,     # result of empty operands
    K.Reduce: lambda b, n, ins, empty: _filled(b, n, init_value(n.attrs["fn"], n.out.dtype)),
    K.Pad: _pad,
    K.Scatter: lambda b, n, ins, empty: _scatter(b, n, ins, empty),
    K.ScatterAdd: lambda b, n, ins, empty: _scatter(b, n, ins, empty),
    K.DynamicUpdateSlice: lambda b, n, ins, empty: (ins[0],),
    **{k: lambda b, n, ins, empty: _filled(b, n, 0) for k in CONTRACTIONS},
    K.Scan: lambda b, n, ins, empty: fold_scan(b, n, ins, empty, _refuse),  # its initial carry
    **{k: lambda b, n, ins, empty: fold_recurrent(b, n, ins, empty, _refuse) for k in RECURRENT},
}


def _scatter(b, node, ins, empty):
    """A scatter of no updates is its operand. One whose indices alone are empty has an index
    vector of length 0 (`x.at[0:n].add(u)` over a whole axis): every update window starts at
    0 in every operand dimension, which is the same scatter on one index column of zeros for
    an operand dimension that is no batching dimension (in bounds whatever the mode)."""
    x, idx, upd = ins
    if upd.size == 0:
        return (x,)
    dn = node.attrs["dimension_numbers"]
    free = [d for d in range(len(x.shape)) if d not in dn.operand_batching_dims]
    if not (empty == [False, True, False] and idx.shape and idx.shape[-1] == 0 and free):
        return _refuse(b, node, ins, empty)
    zeros = b.const(np.zeros((*idx.shape[:-1], 1), idx.dtype))
    out = copy_node(b, node, [x, zeros, upd])
    out[0].node.attrs = dict(node.attrs, dimension_numbers=dn._replace(
        scatter_dims_to_operand_dims=(free[0],)))
    return out


def _refuse(b, node, ins, empty):
    raise RefusalError(
        f"Core ML cannot run {node.kind.name} on a zero-size operand with a non-empty result "
        f"(Core ML has no empty tensors and rlx_jax knows no constant for this result)\n"
        f"  in `{node.text()}`{where(node)}\n"
        f"  What to do: avoid the empty operand here, or use backend='xla' or 'mlx'")


class Folded:
    """The graph to lower plus how the original inputs and results map onto it.

    `graph` is None when no result needs a model; `inputs` lists the original input positions
    that are model inputs; `outputs[i]` is the position of result i among the model's outputs,
    or the numpy array result i always is."""

    def __init__(self, graph, inputs, outputs, source):
        self.graph, self.inputs, self.outputs, self.source = graph, inputs, outputs, source

    @property
    def trivial(self):
        return self.graph is self.source

    def keeps_signature(self):
        """Whether the model has every input and result of the original graph."""
        return (len(self.inputs) == len(self.source.inputs)
                and all(isinstance(o, int) for o in self.outputs))

    def dropped(self):
        """Text naming the empty inputs and the results known without a model."""
        src = self.source
        in_names = src.input_names or [f"input {i}" for i in range(len(src.inputs))]
        out_names = src.output_names or [f"output {i}" for i in range(len(src.outputs))]
        ins = [f"{nm}: {v.type_str()}" for i, (nm, v) in enumerate(zip(in_names, src.inputs))
               if i not in self.inputs]
        outs = [f"{nm}: {v.type_str()}" for nm, v, o in zip(out_names, src.outputs,
                                                            self.outputs)
                if not isinstance(o, int)]
        return ", ".join(ins + outs)

    def options(self, options):
        """Backend options with input/output names narrowed to the model's inputs/outputs."""
        options = dict(options)
        ins, outs = options.get("input_names"), options.get("output_names")
        if ins is not None and len(list(ins)) == len(self.source.inputs):
            options["input_names"] = [list(ins)[i] for i in self.inputs]
        if outs is not None and len(list(outs)) == len(self.outputs):
            options["output_names"] = [nm for nm, o in zip(outs, self.outputs)
                                       if isinstance(o, int)]
        return options


class Argument:
    """A result that is argument `index` itself, given back by the host (no model output)."""

    def __init__(self, index):
        self.index = index


def _unholdable(v):
    """Whether no Core ML tensor holds every value of v's dtype (uint32, int64, float64,
    bfloat16, ...): such an input can only be passed through, never be a model input."""
    dt = np.dtype(v.dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return info.min < np.iinfo(np.int32).min or info.max > np.iinfo(np.int32).max
    return dt not in MIL_DTYPES


def fold_empty(graph, constants_on_host=True):
    """`graph` without zero-size values (see the module docstring), as a Folded. Results that
    fold to constants come from the host unless `constants_on_host` is False (then they stay
    model outputs, as an exported package needs). With `constants_on_host`, an argument
    returned as it is that Core ML cannot hold (a PRNG key's uint32 data) is given back by the
    host (Argument); such an argument read by nothing else (returned, or not used at all: the
    complex64 `x` of `jnp.zeros_like(x, dtype=float)`) is no model input."""
    through = [v.node.kind is K.Input and _unholdable(v) for v in graph.outputs]
    if not any(0 in v.shape for n in graph.nodes for v in n.outputs) and not (
            constants_on_host and any(_unholdable(v) for v in graph.inputs)):
        return Folded(graph, list(range(len(graph.inputs))), list(range(len(graph.outputs))),
                      graph)
    # the values known statically (every element of an empty array is): the empty inputs and
    # the results of nodes whose results are all empty. Such nodes are copied, then dropped with
    # the empty inputs: no model output and no node left reads them.
    known = {v.id for v in graph.inputs if v.size == 0}

    def fold(b, node, ins):
        if all(o.size == 0 for o in node.outputs):
            known.update(o.id for o in node.outputs)
            return None
        empty = [v.id in known for v in node.inputs]
        if not (any(empty) or zero_length(node)):
            return None
        known.update(o.id for o in node.outputs if o.size == 0)   # e.g. a 0-length scan's ys
        return FOLDS.get(node.kind, _refuse)(b, node, ins, empty)
    g, _ = rewrite(graph, fold, "fold_empty")
    results, model_outs = [], []
    for v, x, arg in zip(graph.outputs, g.outputs, through):
        if v.id in known:
            results.append(np.zeros(v.shape, v.dtype))
        elif constants_on_host and arg:
            results.append(Argument(v.node.attrs["index"]))
        elif constants_on_host and x.node.kind is K.Constant:
            results.append(np.asarray(x.node.attrs["value"]).astype(v.dtype).reshape(v.shape))
        else:
            results.append(len(model_outs))
            model_outs.append(x)
    g.outputs = model_outs
    read = {v.id for n in g.nodes for v in n.inputs} | {v.id for v in model_outs}
    known.update(v.id for v, new in zip(graph.inputs, g.inputs)
                 if constants_on_host and _unholdable(v) and new.id not in read)
    kept = [v.node.attrs["index"] for v in graph.inputs if v.id not in known]
    drop = {new.id for v, new in zip(graph.inputs, g.inputs) if v.id in known}
    g.nodes = [n for n in g.nodes if n.kind is not K.Input or n.out.id not in drop]
    g.inputs = [v for v in g.inputs if v.id not in drop]
    for i, v in enumerate(g.inputs):
        v.node.attrs["index"] = i
    if graph.input_names is not None:
        g.input_names = [graph.input_names[i] for i in kept]
    if graph.output_names is not None:
        g.output_names = [nm for nm, r in zip(graph.output_names, results) if isinstance(r, int)]
    return Folded(dce(g).verify() if model_outs else None, kept, results, graph)


class FoldedExecutable(Executable):
    """Runs the model of a Folded graph (if any) on the non-empty inputs and puts the
    statically known results in place; called like the unfolded graph's executable."""

    def __init__(self, folded, inner):
        self.folded, self.inner = folded, inner
        self.graph = folded.source
        self.runtime = inner.runtime if inner is not None else "static"
        self.package_path = getattr(inner, "package_path", None)

    def __call__(self, *args):
        if len(args) != len(self.graph.inputs):
            raise TypeError(f"expected {len(self.graph.inputs)} arrays, got {len(args)}")
        outs = self.inner(*[args[i] for i in self.folded.inputs]) if self.inner else []
        # an argument handed back is a copy, as jax.jit's results never share an argument's
        # buffer (JAX's testArrayCopy)
        return [outs[o] if isinstance(o, int) else np.array(args[o.index], copy=True)
                if isinstance(o, Argument) else o.copy() for o in self.folded.outputs]


class NoProgram:
    """What `Lowered.as_text(level="backend")` / `op_counts` see when no model is built."""

    def __init__(self, folded):
        self.folded = folded

    def op_counts(self):
        return {}

    def as_text(self):
        return f"no Core ML model: every result is known statically ({self.folded.dropped()})"
