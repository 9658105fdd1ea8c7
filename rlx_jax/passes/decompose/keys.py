"""Key physicalization, and the ThreeFry2x32 hash as uint32 IR.

`physicalize(graph)` rewrites every typed PRNG key value (an ir/prng.py key dtype, shape S)
to its physical data, uint32[*S, *key_shape] (key_shape (2,) for threefry2x32, (4,) for rbg),
for backends that do not claim the Random* kinds (legalize runs it first for them). Data
movement on keys moves the data along the trailing key axes; RandomWrap / RandomUnwrap
disappear; RandomBits / RandomSplit / RandomFoldIn / RandomSeed become the implementation's
own functions on the data (ir/prng.py, emitted through the frontend): for threefry they come
down to ThreeFry2x32, Iota and uint32 shifts, xors, slices and concatenations, for rbg to
Philox (ir/philox.py).
Control flow carrying keys gets physical region signatures.

    Given:  b:key<fry>[] = RandomWrap a:u32[2]
            c:key<fry>[2] = RandomSplit[shape=(2,)] b
            d:key<fry>[1] = Slice[start=(1,), limit=(2,)] c
    Result: c':u32[2,2] = (threefry split of a: Iota, ThreeFry2x32, Concat, ...)
            d':u32[1,2] = Slice[start=(1, 0), limit=(2, 2)] c'

DECOMPS[ThreeFry2x32] is the Threefry-2x32 block cipher with 20 rounds (Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3", SC'11), in Binary add / xor / shift_left /
shift_right_logical / or on uint32: the same ~130 nodes for any number of counters.
"""
import numpy as np

from ...errors import LegalizationError
from ...ir import prng
from ...ir.graph import Builder
from ...ir.ops import OpKind as K
from ...ir.rewrite import copy_node
from . import decomp
from .formulas import inline

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
PARITY = 0x1BD11BDA


@decomp(K.ThreeFry2x32)
def _threefry2x32(b, node, k1, k2, x1, x2):
    n = node.outputs[0].ndim
    k1, k2, x1, x2 = (v if v.ndim in (0, n) else b.reshape(v, (1,) * (n - v.ndim) + v.shape)
                      for v in (k1, k2, x1, x2))      # Binary broadcasts scalars and size-1 axes
    u32 = lambda v: b.const(np.uint32(v))  # noqa: E731
    add, xor = (lambda p, q: b.binary("add", p, q)), (lambda p, q: b.binary("xor", p, q))

    def rotl(v, r):
        return b.binary("or", b.binary("shift_left", v, u32(r)),
                        b.binary("shift_right_logical", v, u32(32 - r)))
    ks = (k1, k2, xor(xor(k1, k2), u32(PARITY)))
    v0, v1 = add(x1, ks[0]), add(x2, ks[1])
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            v0 = add(v0, v1)
            v1 = xor(v0, rotl(v1, r))
        v0 = add(v0, ks[(i + 1) % 3])
        v1 = add(add(v1, ks[(i + 2) % 3]), u32(i + 1))
    return v0, v1


def has_keys(graph):
    """Whether any value of `graph` (regions included) is a typed key."""
    return any(prng.is_key(v.dtype) for n in graph.walk() for v in (*n.inputs, *n.outputs))


def physicalize(graph):
    """`graph` with every key value replaced by its uint32[..., *key_shape] data (module docstring);
    `graph` itself when it has none. RandomGamma's implementation works on typed keys again,
    so this runs until none is left (once more per nesting of such kinds)."""
    for _ in range(8):
        if not has_keys(graph):
            return graph
        graph = _rebuild(graph)
    raise LegalizationError(f"PRNG keys left in '{graph.name}' after 8 physicalization rounds")


def _rebuild(graph):
    b = Builder(graph.like())
    env = {}
    for n in graph.nodes:
        ins = [env[v.id] for v in n.inputs]
        b.src = n.src
        if n.kind is K.Input:
            o = n.out
            if prng.is_key(o.dtype):             # a region's key parameter: its data
                outs = (b.input(prng.physical_shape(o.shape, o.dtype), np.uint32),)
                prng.mark_key_data(outs[0])
            else:
                outs = copy_node(b, n, ins)
                b.graph.inputs.append(outs[0])
        elif n.regions:
            regions = tuple(_rebuild(r) for r in n.regions)
            if any(has_keys(r) for r in n.regions) or _touches_keys(n):
                outs = b.add(n.kind, ins, n.attrs, regions=regions)
            else:
                outs = copy_node(b, n, ins, regions)
        elif _touches_keys(n):
            rule = RULES.get(n.kind)
            if rule is None:
                raise LegalizationError(
                    f"{n.kind.name} on PRNG keys has no physical form: `{n.text()}`"
                    + (f" at {n.src}" if n.src else "")
                    + "; use another backend (backend='xla'), or move the keys through "
                      "reshapes, slices, concatenations, gathers or selects only")
            outs = rule(b, n, *ins)
        else:
            outs = copy_node(b, n, ins)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for o, new in zip(n.outputs, outs):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in graph.outputs]
    return b.graph


def _touches_keys(n):
    return any(prng.is_key(v.dtype) for v in (*n.inputs, *n.outputs))


def _kd(n):
    """The key dtype `n` moves or uses."""
    return next(v.dtype for v in (*n.inputs, *n.outputs) if prng.is_key(v.dtype))


def _ks(n):
    """The shape of one key's data for node `n`."""
    return prng.key_shape(_kd(n))


def _same(b, n, *ins, **attrs):
    return b.add(n.kind, ins, {**n.attrs, **attrs})


def _trailing(n, start):
    """The axes of the key data after `start` leading (logical) axes."""
    return tuple(range(start, start + len(_ks(n))))


def _where(b, n, p, x, y):
    if p.ndim:
        p = b.reshape(p, p.shape + (1,) * len(_ks(n)))
    return b.add(K.Where, (p, x, y))


def _zeros(n, starts):
    return (np.zeros((), starts[0].dtype if starts else np.int32),) * len(_ks(n))


def _dynamic_slice(b, n, x, *starts):
    zeros = [b.const(z) for z in _zeros(n, starts)]
    return b.add(K.DynamicSlice, (x, *starts, *zeros), {"sizes": n.attrs["sizes"] + _ks(n)})


def _dynamic_update_slice(b, n, x, u, *starts):
    zeros = [b.const(z) for z in _zeros(n, starts)]
    return b.add(K.DynamicUpdateSlice, (x, u, *starts, *zeros))


def _gather(b, n, x, idx):
    dn = n.attrs["dimension_numbers"]
    dn = dn._replace(offset_dims=tuple(dn.offset_dims) + _trailing(n, n.out.ndim))
    return _same(b, n, x, idx, dimension_numbers=dn,
                 slice_sizes=tuple(n.attrs["slice_sizes"]) + _ks(n))


def _scatter(b, n, x, idx, upd):
    dn = n.attrs["dimension_numbers"]
    dn = dn._replace(update_window_dims=tuple(dn.update_window_dims)
                     + _trailing(n, n.inputs[2].ndim))
    return _same(b, n, x, idx, upd, dimension_numbers=dn)


def _key_fn(fn):
    """A Random* kind's rule: `fn` of ir/prng.py on the data, for the node's key dtype."""
    return lambda b, n, *ins: inline(b, fn, list(ins), dtype=_kd(n),
                                     **{k: v for k, v in n.attrs.items() if k != "key_dtype"})


RULES = {
    K.RandomWrap: lambda b, n, x: x,
    K.RandomUnwrap: lambda b, n, k: k,
    K.RandomBits: _key_fn(prng.bits),
    K.RandomSplit: _key_fn(prng.split),
    K.RandomFoldIn: _key_fn(prng.fold_in),
    K.RandomSeed: _key_fn(prng.seed),
    K.RandomGamma: _key_fn(prng.gamma),
    K.Reshape: lambda b, n, x: b.reshape(x, n.attrs["shape"] + _ks(n)),
    K.Expand: lambda b, n, x: b.expand(x, n.attrs["shape"] + _ks(n),
                                       n.attrs["dims"] + _trailing(n, len(n.attrs["shape"]))),
    K.Transpose: lambda b, n, x: b.transpose(
        x, n.attrs["perm"] + _trailing(n, len(n.attrs["perm"]))),
    K.Slice: lambda b, n, x: _same(b, n, x, start=n.attrs["start"] + (0,) * len(_ks(n)),
                                   limit=n.attrs["limit"] + _ks(n),
                                   strides=n.attrs["strides"] + (1,) * len(_ks(n))),
    K.Concat: lambda b, n, *xs: _same(b, n, *xs),
    K.Reverse: lambda b, n, x: _same(b, n, x),
    K.Where: _where,
    K.DynamicSlice: _dynamic_slice,
    K.DynamicUpdateSlice: _dynamic_update_slice,
    K.Gather: _gather,
    K.Scatter: _scatter,
}
