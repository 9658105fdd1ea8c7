"""Keeping Core ML programs at rank <= 5 where JAX passes through a higher rank on the way.

First every node above rank 5 is done at its canonical rank, unit axes dropped and alike runs
of axes merged (passes/rank_canon.py). What stays above rank 5 then are broadcasts and reductions
whose axes alternate too often to merge: jnp.tile and jnp.repeat of a rank-4 or rank-5 value
broadcast into interleaved axes and merge them again (Expand -> Reshape); their gradients split
and reduce (Reshape -> Reduce). Only the middle value has rank > 5. `lower_rank` rewrites each
such pair into one step per merged axis group (reshape that group out, broadcast or reduce it,
merge it back), each step of rank <= 5, so the program never holds the high-rank value. A pair
that is not of this form is left alone (legality then names it).

Given / Result (tile of f32[2,3,4,5] by (2,2,2,2): canonical rank 8, broadcast and mapped
axes alternating):
    b:f32[2,2,2,3,2,4,2,5] = Expand[dims=(1,3,5,7)] a;  c:f32[4,6,8,10] = Reshape b
    ->  one Expand per tiled axis, each of rank <= 5 (e.g. f32[2,2,60] -> f32[4,60])

Given / Result (tile of f32[2,3,4] by (2,1,3)): canonical rank 4, one step
    b:f32[2,2,1,3,3,4] = Expand[dims=(1,3,5)] a;  c:f32[4,3,12] = Reshape b
    ->  Expand f32[2,12] to f32[2,2,3,12] (dims (1,3));  Reshape to f32[4,3,12]
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....ir.rewrite import rewrite
from ..mil.legality import MAX_RANK
from .rank_canon import canonicalize
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
    uses = graph.readers()
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


def lower_rank(graph):
    """`graph` with its nodes above rank 5 done at their canonical rank (passes/rank_canon.py), and
    the broadcast-merge / split-reduce pairs whose canonical form is still above rank 5
    rewritten group by group at rank <= 5 (the same graph when it holds no value above rank
    5); regions get the same rewrite (passes/rank_control.py)."""
    graph = lower_region_ranks(graph, lower_rank)
    if all(v.ndim <= MAX_RANK for n in graph.nodes for v in n.outputs):
        return graph
    graph = canonicalize(graph)
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
