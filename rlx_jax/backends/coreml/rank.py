"""Keeping Core ML programs at rank <= 5 where JAX passes through rank 6 only on the way.

jnp.tile and jnp.repeat broadcast into interleaved axes and merge them again
(Expand -> Reshape); their gradients split and reduce (Reshape -> Reduce). Only the middle value
has rank > 5. `lower_rank` rewrites each such pair into one step per merged axis group (reshape
that group out, broadcast or reduce it, merge it back), each step of rank <= 5, so the program
never holds the high-rank value. A pair that is not of this form is left alone (legality then
names it). A transpose above rank 5 is done at the rank of its merged form, between reshapes
that compose with the ones around it.

Given / Result (tile of f32[2,3,4] by (2,1,3)):
    b:f32[2,2,1,3,3,4] = Expand[dims=(1,3,5)] a;  c:f32[4,3,12] = Reshape b
    ->  Expand f32[2,2,12]  (axis 0 tiled, rank 3);  Expand f32[4,3,3,4]  (axis 2 tiled, rank 4)

Given / Result (the kernel of a 2-group 3-D conv's input gradient):
    b:f32[2,3,2,2,3,2] = Reshape a:f32[6,2,2,3,2];  c = Transpose[perm=(1,0,2,3,4,5)] b;
    d:f32[3,4,2,3,2] = Reshape c
    ->  Reshape a to f32[2,3,24];  Transpose[perm=(1,0,2)];  Reshape to f32[3,4,2,3,2]
"""
import numpy as np

from ...ir.ops import OpKind as K
from ...ir.rewrite import dce, rewrite
from .legality import MAX_RANK
from .rank_control import lower_region_ranks


def _groups(big, small):
    """For a reshape between `big` and `small` that only merges (or only splits) adjacent axes:
    per axis of `small`, the axes of `big` it is made of; size-1 axes of `big` are left out.
    None when the reshape is not of that form."""
    axes = [a for a, n in enumerate(big) if n != 1]
    groups, i = [], 0
    for n in small:
        group, size = [], 1
        while size < n and i < len(axes):
            group.append(axes[i])
            size *= big[axes[i]]
            i += 1
        if size != n:
            return None
        groups.append(group)
    return groups if i == len(axes) else None


def _runs(parts):
    """Merges adjacent (size, flag) parts of the same flag: [(2, F), (3, F)] -> [(6, F)]."""
    out = []
    for size, flag in parts:
        if out and out[-1][1] == flag:
            out[-1] = (out[-1][0] * size, flag)
        else:
            out.append((size, flag))
    return out


def _around(cur, g):
    """The flattened sizes before and after group g (dropped where they are 1)."""
    pre, post = int(np.prod(cur[:g], dtype=np.int64)), int(np.prod(cur[g + 1:], dtype=np.int64))
    return [pre] if pre > 1 else [], [post] if post > 1 else []


def _steps(groups, cur, axis_part, size_after):
    """The group-by-group plan shared by the two rewrites: for each axis group holding a
    flagged run (`axis_part(axis) -> (size, flag)`), (group, axes before it, its runs, axes
    after it), where `cur` holds the current size of every group and `size_after(g, runs)` the
    size of group g once rewritten. None when a step would pass MAX_RANK."""
    steps = []
    for g, group in enumerate(groups):
        parts = _runs([axis_part(a) for a in group])
        if not any(flag for _, flag in parts):
            continue
        pre, post = _around(cur, g)
        if len(pre) + len(parts) + len(post) > MAX_RANK:
            return None
        steps.append((g, pre, parts, post))
        cur = cur[:g] + [size_after(g, parts)] + cur[g + 1:]
    return steps


def _broadcast_merge(b, x, expand, target):
    """Expand(x) to a high rank followed by a merging Reshape to `target`, step by step."""
    big, dims = expand.attrs["shape"], expand.attrs["dims"]
    src = [1] * len(big)
    for i, d in enumerate(dims):
        src[d] = x.shape[i]
    groups = _groups(big, target)
    if groups is None:
        return None
    cur = [int(np.prod([src[a] for a in g], dtype=np.int64)) for g in groups]
    steps = _steps(groups, cur, lambda a: (big[a], src[a] == 1), lambda g, parts: target[g])
    if steps is None:
        return None
    y = b.reshape(x, [int(np.prod([src[a] for a in g], dtype=np.int64)) for g in groups])
    for g, pre, parts, post in steps:
        y = b.reshape(y, pre + [1 if flag else n for n, flag in parts] + post)
        full = pre + [n for n, _ in parts] + post
        y = b.expand(y, full, tuple(range(len(full))))
        y = b.reshape(y, pre + [target[g]] + post)
    return b.reshape(y, target)


def _split_reduce(b, y, reshape, reduce):
    """A splitting Reshape of y to a high rank followed by a Reduce, group by group."""
    big, axes = reshape.attrs["shape"], set(reduce.attrs["axes"])
    groups = _groups(big, y.shape)
    if groups is None:
        return None
    steps = _steps(groups, list(y.shape), lambda a: (big[a], a in axes),
                   lambda g, parts: int(np.prod([n for n, f in parts if not f])))
    if steps is None:
        return None
    for g, pre, parts, post in steps:
        y = b.reshape(y, pre + [n for n, _ in parts] + post)
        red = tuple(len(pre) + j for j, (_, flag) in enumerate(parts) if flag)
        y = b.add(K.Reduce, (y,), {**reduce.attrs, "axes": red})
        y = b.reshape(y, pre + [int(np.prod([n for n, f in parts if not f]))] + post)
    return b.reshape(y, reduce.out.shape)


def _pairs(graph):
    """{middle value id: its producer} for high-rank middles whose every use is a Reshape
    (after an Expand) or a Reduce (after a Reshape), and that are no graph outputs."""
    uses = {}
    for n in graph.nodes:
        for v in n.inputs:
            uses.setdefault(v.id, []).append(n)
    outs = {v.id for v in graph.outputs}
    pairs = {}
    for n in graph.nodes:
        if len(n.outputs) != 1 or n.out.ndim <= MAX_RANK or n.out.id in outs:
            continue
        want = {K.Expand: K.Reshape, K.Reshape: K.Reduce}.get(n.kind)
        users = uses.get(n.out.id, [])
        if want is not None and users and all(u.kind is want for u in users):
            pairs[n.out.id] = n
    return pairs


def _merged(shape, perm):
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
    sizes = [int(np.prod([shape[a] for a in r], dtype=np.int64)) for r in by_input]
    return sizes, [by_input.index(r) for r in runs]


def _reshape(b, x, shape):
    """b.reshape, reading through reshapes to rank > 5 (a reshape of a reshape is one)."""
    while x.node is not None and x.node.kind is K.Reshape and x.ndim > MAX_RANK:
        x = x.node.inputs[0]
    return b.reshape(x, shape)


def _lower_transposes(graph):
    """Transposes above rank 5 done at the rank of their merged form (JAX's gradient of a
    grouped 3-D conv splits the kernel's output features into groups, swaps them with the
    input features and merges again: [O, I, D, H, W] -> [g, O/g, I, D, H, W] -> ... ->
    [O/g, g·I, D, H, W]; the spatial axes move together). The reshapes around each such
    transpose compose with the ones JAX put there, so no value above rank 5 is left; a
    transpose that merges to no rank <= 5 is left alone (legality then names it)."""
    todo = {n.out.id for n in graph.nodes if n.kind is K.Transpose and n.out.ndim > MAX_RANK
            and len(_merged(n.inputs[0].shape, n.attrs["perm"])[0]) <= MAX_RANK}
    if not todo:
        return graph

    def lower(b, n, ins):
        if n.kind is K.Transpose and n.out.id in todo:
            sizes, perm = _merged(n.inputs[0].shape, n.attrs["perm"])
            return _reshape(b, b.transpose(_reshape(b, ins[0], sizes), perm), n.out.shape)
        if n.kind is K.Reshape and ins[0].ndim > MAX_RANK:
            return _reshape(b, ins[0], n.out.shape)
        return None
    return dce(rewrite(graph, lower, "lower_rank")[0]).verify()


def lower_rank(graph):
    """`graph` with its high-rank transposes and its rank-6 broadcast-merge / split-reduce
    pairs rewritten at rank <= 5 (the same graph when it holds no value above rank 5);
    regions get the same rewrite (rank_control.py)."""
    graph = lower_region_ranks(graph, lower_rank)
    if all(v.ndim <= MAX_RANK for n in graph.nodes for v in n.outputs):
        return graph
    graph = _lower_transposes(graph)
    pairs = _pairs(graph)
    if not pairs:
        return graph
    bypassed = set()                     # new middle values the rewritten users no longer read

    def pair(b, n, ins):
        if not n.inputs or (len(n.outputs) == 1 and n.out.id in pairs):
            return None
        prod = pairs.get(n.inputs[0].id)
        if prod is None:
            return None
        x = b.value_of(prod.inputs[0])
        out = (_broadcast_merge(b, x, prod, n.out.shape) if n.kind is K.Reshape
               else _split_reduce(b, x, prod, n))
        if out is not None:
            bypassed.add(ins[0].id)
        return out                       # None: not of the form, the middle value is kept
    g, _ = rewrite(graph, pair, "lower_rank")
    read = {v.id for n in g.nodes for v in n.inputs} | {v.id for v in g.outputs}
    g.nodes = [n for n in g.nodes
               if len(n.outputs) != 1 or n.out.id not in bypassed or n.out.id in read]
    return g.verify()
