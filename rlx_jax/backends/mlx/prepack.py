"""DequantMatMul weights that are arguments, packed into MLX's layout once per weight buffer.

A DequantMatMul whose q, scale (and zero) are inputs of the program, read by nothing but
DequantMatMul nodes of one packing (forward or transposed, as under jax.grad), has them packed
(rules_quant.pack_mx) before the call instead of in the program: the executable
(PackingExecutable) receives MLX's w uint32 at q's position, scales at scale's and biases at
zero's (an int8 per-channel weight's biases, −128·scales, are computed in the program). The
packed arrays are cached per weight buffer, keyed by the identity of the arguments, for
jax.Arrays (immutable; a numpy or mx array can be changed in place, so those are packed at each
call): a call with the same weights packs nothing and copies nothing into MLX. An entry goes
when its weights are garbage collected.
"""
import weakref

import jax
import mlx.core as mx
import numpy as np

from ...ir.ops import OpKind as K
from .rules_quant import mlx_group, pack_mx
from .runtime import MlxExecutable, to_mx


class Group:
    """The graph input positions of one DequantMatMul's weights, their packing and dtypes."""

    def __init__(self, positions, packing, group, dtypes):
        self.positions, self.packing, self.group, self.dtypes = positions, packing, group, dtypes


def _layout(node):
    """What the packing of a DequantMatMul's weights depends on (not `transpose`)."""
    return node.attrs["packing"], node.attrs["group_size"]


def plan(graph):
    """([Group], ids of the DequantMatMul nodes whose weights arrive packed)."""
    users = {}
    for n in graph.nodes:
        for i, v in enumerate(n.inputs):
            users.setdefault(id(v), []).append((n, i))
    outputs = {id(v) for v in graph.outputs}
    position = {id(v): i for i, v in enumerate(graph.inputs)}
    groups, nodes, taken = {}, set(), set()
    for n in graph.nodes:
        weights = n.inputs[1:]
        if n.kind is not K.DequantMatMul or mlx_group(n) is None or not all(
                id(w) in position and id(w) not in outputs for w in weights):
            continue
        same = all(m.kind is K.DequantMatMul and m.inputs[1:] == weights and i >= 1 and
                   _layout(m) == _layout(n) for w in weights for m, i in users[id(w)])
        key = tuple(position[id(w)] for w in weights)
        if not same or (key not in groups and taken & set(key)):
            continue
        taken.update(key)
        groups[key] = Group(key, n.attrs["packing"], mlx_group(n), [w.dtype for w in weights])
        nodes.add(id(n))
    return list(groups.values()), frozenset(nodes)


class PackingExecutable(MlxExecutable):
    """An MlxExecutable whose weight arguments (plan's groups) are packed before each call,
    from the cache when the same jax.Arrays were packed before (module docstring)."""

    def __init__(self, name, fn, in_dtypes, groups, **options):
        dtypes = list(in_dtypes)
        for g in groups:
            dtypes[g.positions[0]] = np.dtype(np.uint32)
        super().__init__(name, fn, dtypes, **options)
        self.groups, self.cache = groups, {}

    def _pack(self, g, weights):
        key = tuple(id(w) for w in weights)
        hit = self.cache.get(key)
        if hit is not None and all(r() is w for r, w in zip(hit[0], weights)):
            return hit[1]
        packed = pack_mx(g.packing, *[to_mx(w, dt) for w, dt in zip(weights, g.dtypes)],
                         group=g.group)[:len(weights)]
        mx.eval(packed)
        if all(isinstance(w, jax.Array) for w in weights):
            drop = (lambda _ref, cache=self.cache: cache.pop(key, None))
            self.cache[key] = ([weakref.ref(w, drop) for w in weights], packed)
        return packed

    def packed(self, args):
        args = list(args)
        for g in self.groups:
            for i, p in zip(g.positions, self._pack(g, [args[i] for i in g.positions])):
                args[i] = p
        return args

    def inputs(self, args):
        return super().inputs(self.packed(args))

    def __call__(self, *args):
        return super().__call__(*self.packed(args))
