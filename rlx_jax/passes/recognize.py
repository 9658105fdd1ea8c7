"""Recognition (run on the traced graph): high-level formulas and their JAX gradients as RLX's
forward and backward kinds (generated patterns: passes/patterns.py, passes/pattern_table.py),
optax's Adam step as AdamUpdate (passes/recognize_optim.py), its SGD step with momentum as
SgdMomentumUpdate (passes/recognize_sgd.py), flax's recurrent cells under a scan as Lstm
(passes/recognize_rnn.py), then JAX's own autodiff output as
RLX backward kinds:

  SelectAndScatterAdd[select_prim=ge] on a rank-4 operand        -> MaxPool2dBackward
  Conv(dy, Reverse(w)) transposing a conv w.r.t. its input        -> Conv2dBackwardInput
  Conv(x, dy) transposing a conv w.r.t. its kernel                -> Conv2dBackwardWeight
  ScatterAdd into zeros transposing an embedding gather           -> GatherBackward
  Cumsum[reverse=True] (the transpose of a forward cumsum)        -> CumsumBackward

Recognition is exact or it does not fire: every attribute is checked, and for the convolutions
the candidate's decomposition is built and compared node by node (kinds, attributes, operands)
with the original subgraph, so decomposing a recognised node reproduces JAX's computation.
"""
import itertools

import numpy as np

from ..errors import IRTypeError
from ..ir.graph import Builder, Graph
from ..tables import rule_table
from ..ir.ops import OpKind as K
from ..ir.reference import gather_dimension_numbers
from ..ir.rewrite import dce, rewrite
from .decompose import DECOMPS
from .pattern_index import Index
from .pattern_table import PATTERNS, emit
from .patterns import F32, is_float, match, signature, terms
from ..numpy_rules import with_own_numpy_rules
from .recognize_optim import recognize_optimizers
from .recognize_rnn import recognize_rnn
from .recognize_sgd import recognize_sgd

RECOGNIZERS, recognizer = rule_table("RECOGNIZERS")


@with_own_numpy_rules
def recognize(graph, patterns=True):
    """Returns `graph` with recognised subgraphs replaced by high-level and backward kinds
    (see module doc); `patterns=False` skips the generated patterns. The patterns' formulas
    are traced under JAX's default numpy rules (numpy_rules.py)."""
    if patterns:
        graph = recognize_sgd(recognize_optimizers(recognize_patterns(recognize_rnn(graph))))
    def replace(b, n, ins):
        rec = RECOGNIZERS.get(n.kind)
        cand = rec(n) if rec is not None else None
        if cand is None:
            return None
        kind, operands, attrs, prep = cand
        operands = [b.value_of(v) for v in operands]
        if prep is not None:
            operands = prep(b, *operands)
        return b.add(kind, operands, attrs)
    new, fired = rewrite(graph, replace, "recognising")
    return dce(new).verify() if fired else graph


SUM = (K.Binary, "add")


def _present(graph):
    """The (kind, fn) pairs of the graph's nodes, each also as (kind, None), and the dtypes
    of its values."""
    out, dtypes = set(), set()
    for n in graph.walk():
        out.update(((n.kind, n.attrs.get("fn")), (n.kind, None)))
        dtypes.update(v.dtype for v in n.outputs)
    return out, dtypes


def _variants(ref, dtypes):
    """The dtype variants of ref's templates (patterns.VARIANTS) whose dtypes the graph has
    (float64 served by the float32 templates)."""
    dtypes = dtypes | ({F32} if np.dtype(np.float64) in dtypes else set())
    return [v for v in ref.variants() if set(v) <= dtypes]


def _at(b, v, dtype):
    """v cast to dtype when both are floats of different dtypes (one Cast per value)."""
    if dtype is None or v.dtype == dtype or not is_float(v.dtype):
        return v
    return emit(b, K.Cast, (v,), {"dtype": dtype})


def recognize_patterns(graph, table=PATTERNS):
    """Replaces every exact match of a generated pattern (passes/patterns.py) by its kind;
    each node is offered only the patterns whose two top levels it has (pattern_index.py)."""
    present, dtypes = _present(graph)
    index = Index([(p, (rank, v)) for p in table if p.ref.trigger <= present
                   for rank in p.ref.ranks for v in _variants(p.ref, dtypes)
                   if p.ref.template(rank, v) is not None])
    if not index:          # (a template is None when, e.g., its library is not installed)
        return graph
    fired = set()

    def replace(b, n, ins):
        if len(n.outputs) != 1:
            return None
        sig = signature(n.out)
        uterms = terms(n.out, fired) if sig == SUM and index.has(sig) else None
        for p, ranks in index.candidates(n.out, uterms):
            got = match(p, n.out, fired, uterms, ranks)
            if got is None:
                continue
            bound, params, rest, compute = got
            # the kind computes at the formula's widest dtype (a 16-bit formula's statistics
            # are float32): float operands cast to it, the result cast to the root's dtype
            ops = {k: _at(b, b.value_of(v), compute) for k, v in bound.items()}
            out = p.replace(b, ops, params, n.out)
            if out is None:
                continue
            out = _at(b, out, n.out.dtype)
            for t in reversed(rest):
                out = b.binary("add", b.value_of(t), out)
            fired.add(n)
            return out
        return None
    new, count = rewrite(graph, replace, "recognising patterns")
    return dce(new).verify() if count else graph


# ---- exact structural comparison of a candidate's decomposition with the original ----
def _same_attr(x, y):
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
    try:
        return bool(x == y)
    except (TypeError, ValueError):   # e.g. tuples holding arrays: not a plain attribute
        return False


def _same(tv, av, bound):
    """Does template value `tv` compute the same as actual value `av`?"""
    tn, an = tv.node, av.node
    if (tv.shape, tv.dtype) != (av.shape, av.dtype):
        return False
    if tn.kind is K.Input:
        return bound[tn.attrs["index"]] is av
    if an is None or an.kind is not tn.kind or tv.index != av.index:
        return False
    if len(tn.inputs) != len(an.inputs) or tn.attrs.keys() != an.attrs.keys():
        return False
    if not all(_same_attr(tn.attrs[k], an.attrs[k]) for k in tn.attrs):
        return False
    return all(_same(t, a, bound) for t, a in zip(tn.inputs, an.inputs))


def reproduces(kind, operands, attrs, original):
    """True when decomposing kind(operands; attrs) yields exactly the subgraph of `original`."""
    b = Builder(Graph("candidate"))
    ins = [b.input(v.shape, v.dtype) for v in operands]
    try:
        b.add(kind, ins, attrs)
        t = DECOMPS[kind](b, b.graph.nodes[-1], *ins)
    except IRTypeError:   # operands of impossible types: the candidate does not match
        return False
    t = t[0] if isinstance(t, (tuple, list)) else t
    return _same(t, original, list(operands))


# ---- recognizers: node -> (kind, operands, attrs, prep) or None ----
def _zero_pad(a, axis):
    return a["window_dimensions"][axis] == 1 and a["window_strides"][axis] == 1 and \
        tuple(a["padding"][axis]) == (0, 0)


@recognizer(K.SelectAndScatterAdd)
def _max_pool_backward(n):
    a = n.attrs
    dy, x = n.inputs
    if a["select_prim"] != "ge" or x.ndim != 4:
        return None
    if sum(_zero_pad(a, i) for i in range(4)) < 2:     # batch and channel untouched
        return None
    attrs = {k: a[k] for k in ("window_dimensions", "window_strides", "padding")}
    return K.MaxPool2dBackward, (x, dy), attrs, None


def _swap01(spec):
    return (spec[1], spec[0]) + tuple(spec[2:])


def _hi_candidates(in_size, out_size, k, stride, rdil, lo):
    """Forward high paddings consistent with out = floor((in + lo + hi - kd)/stride) + 1."""
    kd = (k - 1) * rdil + 1
    base = (out_size - 1) * stride + kd - in_size - lo
    return [h for h in range(base, base + stride) if h >= 0] or [base]


def _conv_candidates(fwd, in_shape, out_shape, w_shape, lo):
    """Forward convs (batch on axis 0 of input and output, as in NHWC/NCHW) whose transpose
    could be the node. A stride-1 forward conv is itself the kernel gradient of another conv;
    the batch-axis condition keeps forward convs from being read as gradients."""
    lhs, rhs, out = fwd["dimension_numbers"]
    if lhs[0] != 0 or out[0] != 0:
        return
    per_dim = []
    for i in range(len(lhs) - 2):
        per_dim.append(_hi_candidates(in_shape[lhs[2 + i]], out_shape[out[2 + i]],
                                      w_shape[rhs[2 + i]], fwd["window_strides"][i],
                                      fwd["rhs_dilation"][i], lo[i]))
    for his in itertools.product(*per_dim):
        yield dict(fwd, padding=tuple((int(l), int(h)) for l, h in zip(lo, his)))


@recognizer(K.Conv)
def _conv_backward(n):
    a = n.attrs
    if n.out.ndim != 4 or a["feature_group_count"] != 1 or a["batch_group_count"] != 1:
        return None
    lhs_b, rhs_b, out_b = a["dimension_numbers"]
    src = n.inputs[1].node
    common = {"preferred_element_type": a["preferred_element_type"], "feature_group_count": 1,
              "batch_group_count": 1}
    if src is not None and src.kind is K.Reverse:
        # input gradient: conv(dy, rev(w)) with lhs_dilation = forward strides
        dy, w = n.inputs[0], src.inputs[0]
        dn = (tuple(out_b), _swap01(rhs_b), tuple(lhs_b))
        fwd = dict(window_strides=a["lhs_dilation"], lhs_dilation=(1, 1),
                   rhs_dilation=a["rhs_dilation"], dimension_numbers=dn, **common)
        kd = [(w.shape[dn[1][2 + i]] - 1) * a["rhs_dilation"][i] + 1 for i in range(2)]
        lo = [kd[i] - 1 - a["padding"][i][0] for i in range(2)]
        for cand in _conv_candidates(fwd, n.out.shape, dy.shape, w.shape, lo):
            attrs = dict(cand, input_shape=n.out.shape)
            if reproduces(K.Conv2dBackwardInput, (dy, w), attrs, n.out):
                return K.Conv2dBackwardInput, (dy, w), _ordered(attrs), None
        return None
    # kernel gradient: conv(x, dy) with window_strides = forward rhs_dilation
    x, dy = n.inputs
    dn = (_swap01(lhs_b), _swap01(out_b), _swap01(rhs_b))
    fwd = dict(window_strides=a["rhs_dilation"], lhs_dilation=a["lhs_dilation"],
               rhs_dilation=a["window_strides"], dimension_numbers=dn, **common)
    lo = [p[0] for p in a["padding"]]
    for cand in _conv_candidates(fwd, x.shape, dy.shape, n.out.shape, lo):
        attrs = dict(cand, weight_shape=n.out.shape)
        if reproduces(K.Conv2dBackwardWeight, (x, dy), attrs, n.out):
            return K.Conv2dBackwardWeight, (x, dy), _ordered(attrs), None
    return None


_CONV_KEYS = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "dimension_numbers",
              "feature_group_count", "batch_group_count", "preferred_element_type")


def _ordered(attrs):
    extra = [k for k in attrs if k not in _CONV_KEYS]
    return {k: attrs[k] for k in _CONV_KEYS + tuple(extra)}


def _is_zeros(v):
    n = v.node
    if n is None:
        return False
    if n.kind is K.Expand and n.attrs["dims"] == ():
        n = n.inputs[0].node
    return n is not None and n.kind is K.Constant and not np.any(n.attrs["value"])


@recognizer(K.ScatterAdd)
def _gather_backward(n):
    a = n.attrs
    table, idx, dy = n.inputs
    if not _is_zeros(table) or idx.ndim < 1 or idx.shape[-1] != 1:
        return None
    if a["indices_are_sorted"] or a["unique_indices"]:
        return None
    slice_rank = table.ndim - 1
    if dy.shape != idx.shape[:-1] + table.shape[1:]:
        return None
    if a["dimension_numbers"] != gather_dimension_numbers(idx.ndim - 1, slice_rank):
        return None
    attrs = {"axis": 0, "num": table.shape[0], "mode": a["mode"]}
    return K.GatherBackward, (dy, idx), attrs, lambda b, dy, idx: (dy, b.reshape(
        idx, idx.shape[:-1]))


@recognizer(K.Cumsum)
def _cumsum_backward(n):
    if not n.attrs["reverse"]:
        return None
    return K.CumsumBackward, tuple(n.inputs), {"axis": n.attrs["axis"], "reverse": False}, None
