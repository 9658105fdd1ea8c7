"""Rank canonicalisation: each node holding a value above rank 5 done at the lowest rank its
computation allows, so a Core ML program keeps values above rank 5 only where they are needed.

Most values above rank 5 are views. Their unit axes are unit in every operand, or are
broadcast into by nothing. Runs of adjacent axes that the node treats alike can be merged:
all kept or all reduced, all mapped from the operand or all broadcast, all untouched by a
slice or pad. A node is rewritten as: every operand reshaped to the node's canonical axes
(unit axes dropped, alike runs merged), the same op at that rank, and a reshape back to the
node's own output type. A reshape of a reshape reads through to the low-rank value, so the
reshapes between rewritten neighbours compose and vanish. A node whose canonical form is still
above rank 5, or of a kind without a rule here, is kept (legality then names it), and so is a
value above rank 5 at the program boundary.

Given / Result (jnp.tile(cls: f32[1,1,32], (2,1,1)), as in a ViT's class token):
    b:f32[2,1,1,1,1,32] = Expand[dims=(1,3,5)] a;  c:f32[2,1,32] = Reshape b
    ->  a' = Reshape a to f32[32];  b' = Expand[dims=(1,)] a' to f32[2,32];  c = Reshape b'

Given / Result (its gradient):
    l:f32[2,1,1,1,1,32] = Reshape k:f32[2,1,32];  m:f32[1,1,32] = Reduce[axes=(0,2,4)] l
    ->  k' = Reshape k to f32[2,32];  m' = Reduce[axes=(0,)] k';  m = Reshape m'
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....ir.rewrite import dce, rewrite
from ..mil.legality import MAX_RANK

DROP = object()         # an axis signature: a unit axis, left out of the canonical form
ELEMENTWISE = frozenset({K.Activation, K.Cast, K.Binary, K.Compare, K.Where})
ONE_AXIS = {K.Cumsum: "axis", K.CumProd: "axis", K.CumMax: "axis", K.CumMin: "axis",
            K.CumLogSumExp: "axis", K.ArgMax: "axis", K.ArgMin: "axis", K.Sort: "dimension",
            K.Narrow: "axis", K.Concat: "axis", K.TopK: None}


def _prod(sizes):
    return int(np.prod(list(sizes), dtype=np.int64))


def groups(sigs):
    """Axes grouped for the canonical form, from one signature per axis: DROP axes are left
    out, adjacent kept axes of equal signature share a group (None never merges)."""
    out, prev = [], None
    for a, s in enumerate(sigs):
        if s is DROP:
            continue
        if out and s is not None and s == prev:
            out[-1].append(a)
        else:
            out.append([a])
        prev = s
    return out


def sizes(shape, grouped):
    return [_prod(shape[a] for a in g) for g in grouped]


def reshape_through(b, x, shape):
    """b.reshape, reading through reshapes to rank > 5 (a reshape of a reshape is one)."""
    while x.node is not None and x.node.kind is K.Reshape and x.ndim > MAX_RANK:
        x = x.node.inputs[0]
    return b.reshape(x, shape)


def _fits(grouped):
    return len(grouped) <= MAX_RANK


def _elementwise(b, n, ins):
    """Operands broadcast numpy-style: an axis's signature is which operands it is not
    broadcast in (rank-0 operands stay as they are)."""
    out = n.out.shape
    padded = [None if v.ndim == 0 else (1,) * (len(out) - v.ndim) + v.shape for v in n.inputs]
    g = groups([DROP if s == 1 else tuple(p[a] == s for p in padded if p is not None)
                for a, s in enumerate(out)])
    if not _fits(g):
        return None
    low = [x if p is None else reshape_through(b, x, sizes(p, g)) for x, p in zip(ins, padded)]
    return b.add(n.kind, low, n.attrs)


def _expand(b, n, ins):
    """Output axes mapped from the operand (not broadcast) merge with mapped neighbours,
    broadcast ones with broadcast neighbours; the operand's own unit axes vanish."""
    shape, dims = n.attrs["shape"], n.attrs["dims"]
    src = {d: n.inputs[0].shape[i] for i, d in enumerate(dims)}
    sigs = [DROP if s == 1 else src.get(a) == s for a, s in enumerate(shape)]
    g = groups(sigs)
    if not _fits(g):
        return None
    low = sizes(shape, g)
    mapped = tuple(i for i, grp in enumerate(g) if sigs[grp[0]])
    x = reshape_through(b, ins[0], [low[i] for i in mapped])
    return b.expand(x, low, mapped)


def _reduce(b, n, ins):
    """Reduced axes merge with reduced neighbours, kept ones with kept ones; a reduction over
    unit axes only is a reshape."""
    x, axes = n.inputs[0], set(n.attrs["axes"])
    sigs = [DROP if s == 1 else a in axes for a, s in enumerate(x.shape)]
    g = groups(sigs)
    if not _fits(g):
        return None
    y = reshape_through(b, ins[0], sizes(x.shape, g))
    red = tuple(i for i, grp in enumerate(g) if sigs[grp[0]])
    return b.add(K.Reduce, (y,), {**n.attrs, "axes": red}) if red else y


def merged_transpose(shape, perm):
    """The same transpose at its lowest rank: size-1 axes dropped, runs of axes that stay
    adjacent and in order merged. Returns (merged input shape, merged perm)."""
    kept = [p for p in perm if shape[p] != 1]
    pos = {a: i for i, a in enumerate(sorted(kept))}
    runs = []                                           # in output order
    for p in kept:
        if runs and pos[p] == pos[runs[-1][-1]] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    by_input = sorted(runs, key=lambda r: r[0])
    return sizes(shape, by_input), [by_input.index(r) for r in runs]


def _transpose(b, n, ins):
    low, perm = merged_transpose(n.inputs[0].shape, n.attrs["perm"])
    if len(low) > MAX_RANK:
        return None
    return b.transpose(reshape_through(b, ins[0], low), perm)


def _one_axis(b, n, ins):
    """Ops along one axis (scans, arg-reductions, sorts, concat, narrow; top_k along the
    last): the axes before it merge, and so do those after it."""
    name = ONE_AXIS[n.kind]
    x = n.inputs[0]
    k = n.attrs[name] if name else x.ndim - 1
    g = groups([None if a == k else DROP if s == 1 else a < k for a, s in enumerate(x.shape)])
    low = [reshape_through(b, y, sizes(v.shape, g)) for y, v in zip(ins, n.inputs)]
    at = next(i for i, grp in enumerate(g) if grp == [k])
    return b.add(n.kind, low, {**n.attrs, name: at} if name else n.attrs)


def _piecewise(b, n, ins, untouched, attrs):
    """Slice, Pad, Reverse: axes the op leaves alone merge with untouched neighbours (each
    other axis stays on its own); `attrs(groups)` gives the attributes of the merged op."""
    x = n.inputs[0]
    sigs = [DROP if s == 1 and untouched(a) else True if untouched(a) else None
            for a, s in enumerate(x.shape)]
    g = groups(sigs)
    if not _fits(g):
        return None
    y = reshape_through(b, ins[0], sizes(x.shape, g))
    return b.add(n.kind, (y, *ins[1:]), {**n.attrs, **attrs(g, sizes(x.shape, g))})


def _slice(b, n, ins):
    a, shape = n.attrs, n.inputs[0].shape
    strides = a.get("strides") or (1,) * len(shape)

    def full(i):
        return a["start"][i] == 0 and a["limit"][i] == shape[i] and strides[i] == 1

    def attrs(g, low):
        one = [len(grp) == 1 and not full(grp[0]) for grp in g]
        return {"start": tuple(a["start"][grp[0]] if o else 0 for grp, o in zip(g, one)),
                "limit": tuple(a["limit"][grp[0]] if o else s for grp, o, s in zip(g, one, low)),
                "strides": tuple(strides[grp[0]] if o else 1 for grp, o in zip(g, one))}
    return _piecewise(b, n, ins, full, attrs)


def _pad(b, n, ins):
    config = n.attrs["config"]

    def untouched(i):
        return tuple(config[i]) == (0, 0, 0)
    return _piecewise(b, n, ins, untouched, lambda g, low: {"config": tuple(
        (0, 0, 0) if len(grp) > 1 or untouched(grp[0]) else tuple(config[grp[0]])
        for grp in g)})


def _reverse(b, n, ins):
    """Reversed axes merge with reversed neighbours (reversing both axes of [m, n] reverses
    its m·n elements), kept axes with kept ones."""
    axes = set(n.attrs["axes"])
    x = n.inputs[0]
    g = groups([DROP if s == 1 else a in axes for a, s in enumerate(x.shape)])
    if not _fits(g):
        return None
    y = reshape_through(b, ins[0], sizes(x.shape, g))
    rev = tuple(i for i, grp in enumerate(g) if grp[0] in axes)
    return b.add(K.Reverse, (y,), {"axes": rev}) if rev else y


def _iota(b, n, ins):
    shape, dim = n.attrs["shape"], n.attrs["dimension"]
    g = groups([None if a == dim else DROP if s == 1 else a < dim for a, s in enumerate(shape)])
    at = next(i for i, grp in enumerate(g) if grp == [dim])
    return b.add(K.Iota, (), {**n.attrs, "shape": tuple(sizes(shape, g)), "dimension": at})


def _constant(b, n, ins):
    value = np.asarray(n.attrs["value"])
    low = [s for s in value.shape if s != 1]
    return b.const(value.reshape(low if len(low) <= MAX_RANK else [value.size]))


RULES = {K.Expand: _expand, K.Reduce: _reduce, K.Transpose: _transpose, K.Slice: _slice,
         K.Pad: _pad, K.Reverse: _reverse, K.Iota: _iota, K.Constant: _constant,
         **{k: _elementwise for k in ELEMENTWISE}, **{k: _one_axis for k in ONE_AXIS}}


def _high(n):
    return any(v.ndim > MAX_RANK for v in (*n.inputs, *n.outputs))


def canonicalize(graph):
    """`graph` with every node that holds a value above rank 5 done at its canonical rank,
    where that is <= 5 (see the module docstring); the same graph when none is rewritten."""
    if not any(_high(n) for n in graph.nodes):
        return graph

    def lower(b, n, ins):
        if not _high(n) or n.regions:
            return None
        if n.kind is K.Reshape:
            return reshape_through(b, ins[0], n.out.shape) if ins[0].ndim > MAX_RANK else None
        rule = RULES.get(n.kind)
        out = rule(b, n, ins) if rule is not None else None
        if out is None:
            return None
        outs = out if isinstance(out, tuple) else (out,)
        back = tuple(reshape_through(b, y, o.shape) for y, o in zip(outs, n.outputs))
        return back if len(back) > 1 else back[0]
    new, changed = rewrite(graph, lower, "lower_rank")
    return dce(new).verify() if changed else graph
