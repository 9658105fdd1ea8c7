"""Interval analysis of integer values, to prove where non-int32 integers fit in int32.

bounds[value id] = (lo, hi) with Python ints, or None where nothing is proven (a result that
may have wrapped around, or a kind without a rule here). A program input holds the values of
its Input node's `bounds` attribute ((lo, hi), set e.g. on the inputs of a graph segment)
where it has one, else those of its dtype within int32 range: a uint32 input is assumed to
hold [0, 2**31-1], an int64 one [-2**31, 2**31-1] (`input_bounds`; the Core ML model boundary
checks every call's arguments against them). What is computed from an input is analysed as
usual: a uint32 `count + 1` may reach 2**31 and is not proven to fit.
"""
import numpy as np

from ....ir.ops import OpKind as K

I32_MIN, I32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)

# kinds whose integer outputs take their values from the union of some operands' values
_SAME_VALUES = {
    K.Reshape: (0,), K.Expand: (0,), K.Transpose: (0,), K.Slice: (0,), K.Narrow: (0,),
    K.Reverse: (0,), K.DynamicSlice: (0,), K.Pad: (0, 1), K.Where: (1, 2),
    K.DynamicUpdateSlice: (0, 1), K.CumMax: (0,), K.CumMin: (0,),
}


def _range(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return (0, 1)
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))


def input_bounds(v):
    """(lo, hi): the values the program input `v` (an integer or bool Value produced by an
    Input node) is assumed to hold; see the module docstring."""
    lo, hi = _range(v.dtype)
    given = v.node.attrs.get("bounds") if v.node is not None else None
    if given is None:
        return (max(lo, I32_MIN), min(hi, I32_MAX))
    return (max(lo, int(given[0])), min(hi, int(given[1])))


def _union(*bs):
    return (min(b[0] for b in bs), max(b[1] for b in bs))


def _binary(fn, a, b):
    if fn == "add":
        return (a[0] + b[0], a[1] + b[1])
    if fn == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if fn == "mul":
        ps = [x * y for x in a for y in b]
        return (min(ps), max(ps))
    if fn == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if fn == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if fn in ("div", "rem") and (b[0] > 0 or b[1] < 0):   # a divisor that is never 0
        if fn == "div":   # truncating division is monotonic in each operand: the corners
            qs = [_tdiv(x, y) for x in a for y in b]
            return (min(qs), max(qs))
        m = max(abs(b[0]), abs(b[1])) - 1   # |a rem b| < |b|, with the dividend's sign
        return (max(a[0], -m) if a[0] < 0 else 0, min(a[1], m) if a[1] > 0 else 0)
    return None


def _tdiv(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


_UNARY = {   # integer unary fn -> (lo, hi) -> bounds of the result
    "neg": lambda lo, hi: (-hi, -lo),
    "sign": lambda lo, hi: (int(np.sign(lo)), int(np.sign(hi))),
    "abs": lambda lo, hi: (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)),
                           max(abs(lo), abs(hi))),
}


def _node(n, get):
    a = n.attrs
    if n.kind is K.Constant:
        v = np.asarray(a["value"])
        return [(int(v.min()), int(v.max()))] if v.size else None
    if n.kind is K.Iota:
        return [(0, max(a["shape"][a["dimension"]] - 1, 0))]
    if n.kind in _SAME_VALUES:
        return [_union(*[get(n.inputs[i]) for i in _SAME_VALUES[n.kind]])]
    if n.kind is K.Concat:
        return [_union(*[get(v) for v in n.inputs])]
    if n.kind is K.Sort:
        return [get(v) if v.dtype.kind in "iub" else None for v in n.inputs]
    if n.kind in (K.ArgMax, K.ArgMin):
        return [(0, n.inputs[0].shape[a["axis"]] - 1)]
    if n.kind is K.TopK:
        return [get(n.inputs[0]), (0, n.inputs[0].shape[-1] - 1)]
    if n.kind is K.Reduce and a["fn"] in ("max", "min"):
        return [get(n.inputs[0])]
    if n.kind is K.Gather and a["mode"] != "fill":
        return [get(n.inputs[0])]
    if n.kind is K.Scatter and a["fn"] in ("replace", "max", "min"):
        return [_union(get(n.inputs[0]), get(n.inputs[2]))]
    if n.kind is K.Binary:
        return [_binary(a["fn"], get(n.inputs[0]), get(n.inputs[1]))]
    if n.kind is K.Activation and a["fn"] in _UNARY:
        return [_UNARY[a["fn"]](*get(n.inputs[0]))]
    if n.kind is K.Cast:
        src = n.inputs[0]
        if src.dtype == np.bool_:
            return [(0, 1)]
        if src.dtype.kind in "iu":
            return [get(src)]
        if src.dtype.kind == "f":       # float -> integer conversion saturates (as XLA's)
            return [_range(n.out.dtype)]
    return None


def intervals(graph):
    """{value id: (lo, hi) or None} for the integer values of `graph`'s top level."""
    bounds = {}

    class Unknown(Exception):
        pass

    def get(v):
        if v.dtype == np.bool_:
            return (0, 1)
        b = bounds.get(v.id)
        if b is None:
            raise Unknown
        return b

    for n in graph.nodes:
        if not any(o.dtype.kind in "iu" for o in n.outputs):
            continue
        if n.kind is K.Input:
            bounds[n.out.id] = input_bounds(n.out)
            continue
        try:
            res = _node(n, get)
        except Unknown:
            res = None
        for i, o in enumerate(n.outputs):
            if o.dtype.kind not in "iu":
                continue
            full = _range(o.dtype)
            b = res[i] if res is not None else None
            # a result outside the dtype's range may have wrapped: nothing is proven then
            ok = b is not None and full[0] <= b[0] and b[1] <= full[1]
            bounds[o.id] = b if ok else None
    return bounds
