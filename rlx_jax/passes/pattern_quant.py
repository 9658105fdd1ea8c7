"""Quantized linear layers as DequantMatMul: the reference formulas (ir/reference_quant.py's, as
JAX inference code writes them), traced into generated patterns (passes/patterns.py) and the
replacements that check each packing's types; pattern_table.py appends QUANT_PATTERNS.

  int8 per output channel   x @ (q.astype(x.dtype) * scale)        q int8 [K, N], scale [N]
  int4, two nibbles a byte  w = stack([q & 0xF, q >> 4], 1).reshape(K, N).astype(x.dtype)
                            x @ ((w.reshape(K/G, G, N) - zero[:, None]) * scale[:, None])
                                .reshape(K, N)                     q uint8 [K/2, N],
                                                                   scale, zero [K/G, N]
  int4, eight a word        w = ((q[:, None] >> arange(8, dtype=uint32)[None, :, None] * 4)
                                 & 0xF).reshape(K, N).astype(x.dtype), then as above
                                                                   q uint32 [K/8, N]

Each forward alone, and the gradient w.r.t. x of the joint forward and `jax.vjp` (x @ wᵀ, a
transposed DequantMatMul). The group size G is read off the shapes (K / scale.shape[0]) and must
be one of GROUP_SIZES (those MLX's quantized_matmul takes); x may have any leading axes. A
constant uint32 weight becomes int4_u8's bytes (the same nibbles; Core ML has no uint32). A
formula that differs (another shift or mask, the nibbles in the other order, a scale broadcast
along another axis, an unsigned int8 weight, a scale of another dtype than x) is left alone.
"""
import jax
import numpy as np

from ..ir.ops import OpKind as K
from ..ir.reference_quant import PACKINGS, PER_WORD, dequantize
from .pattern_refs import F32, LEAD
from .patterns import Pattern, Reference

GROUP_SIZES = (32, 64, 128)
Q_DTYPES = {"int8_per_channel": np.int8, "int4_u8": np.uint8, "int4_u32": np.uint32}


def _layer(packing):
    """The formula as a function of x, q, scale (, zero) returning (y,)."""
    def layer(x, q, scale, *zero):
        k = PER_WORD[packing] * q.shape[0]
        group = k if packing == "int8_per_channel" else k // scale.shape[0]
        return (x @ dequantize(q, scale, *zero, dtype=x.dtype, packing=packing,
                               group_size=group),)
    return layer


def _vjp(fn):
    """The joint forward and gradient w.r.t. x of fn(x, *weights): (y, dx)."""
    def joint(x, *weights_dy):
        *weights, dy = weights_dy
        y, pull = jax.vjp(lambda x: fn(x, *weights)[0], x)
        return (y, *pull(dy))
    return joint


def _example(packing):
    def example(rank):
        x, dy = (LEAD[:rank - 1] + (8,), F32), (LEAD[:rank - 1] + (6,), F32)
        q = ((8 // PER_WORD[packing], 6), Q_DTYPES[packing])
        if packing == "int8_per_channel":
            return {"x": x, "q": q, "scale": ((6,), F32), "dy": dy}
        return {"x": x, "q": q, "scale": ((2, 6), F32), "zero": ((2, 6), F32), "dy": dy}
    return example


def _x_of_dy(packing):
    def fill(bound):
        """x's type from the cotangent's and q's (the gradient reads no x)."""
        if "dy" not in bound or "q" not in bound:
            return None
        (lead, dt), k = bound["dy"], bound["q"][0][0] * PER_WORD[packing]
        return {"x": (tuple(lead[:-1]) + (k,), dt), **bound}
    return fill


def words_as_bytes(q):
    """A constant int4_u32 weight [K/8, N] as int4_u8's [K/2, N] (the same nibbles: byte i of
    a word holds nibbles 2i and 2i + 1, the low one first, as int4_u8's bytes do)."""
    k8, n = q.shape
    return np.ascontiguousarray(q.astype("<u4").T).view(np.uint8).reshape(n, 4 * k8).T.copy()


def _replace(packing, transpose=False):
    """DequantMatMul of the bound operands; with transpose (the gradient w.r.t. x) of the
    cotangent dy [..., N]."""
    def replace(b, o, p, root):
        x, q, scale = o["dy" if transpose else "x"], o["q"], o["scale"]
        floats = [o[n] for n in ("scale", "zero") if n in o]
        if x.dtype.kind != "f" or any(v.dtype != x.dtype for v in floats) or q.ndim != 2 or \
                q.dtype != Q_DTYPES[packing]:
            return None
        k = PER_WORD[packing] * q.shape[0]
        if packing == "int8_per_channel":
            group, ok = k, scale.shape == q.shape[1:]
        else:
            group = k // max(scale.shape[0], 1)
            ok = group in GROUP_SIZES and scale.shape == o["zero"].shape == (k // group,
                                                                             q.shape[1])
        if not ok or x.shape[-1] != (q.shape[1] if transpose else k):
            return None
        kind = packing
        if packing == "int4_u32" and q.node.kind is K.Constant:
            kind, q = "int4_u8", b.const(words_as_bytes(q.node.attrs["value"]))
        return b.add(K.DequantMatMul, (x, q, *floats), {
            "packing": kind, "bits": PACKINGS[kind], "group_size": group,
            "transpose": transpose})
    return replace


def _patterns(packing, description, trigger):
    names = ("x", "q", "scale") + (() if packing == "int8_per_channel" else ("zero",))
    fwd = Reference(f"DequantMatMul {description}", _layer(packing), names, _example(packing),
                    ranks=(2, 3), trigger=trigger)
    vjp = Reference(f"DequantMatMul {description}, joint forward and gradient w.r.t. x",
                    _vjp(_layer(packing)), names + ("dy",), _example(packing),
                    fill=_x_of_dy(packing), ranks=(2, 3), trigger=trigger)
    return [Pattern(fwd, 0, _replace(packing)), Pattern(vjp, 1, _replace(packing, True))]


_SHIFT = {(K.Binary, "shift_right_logical"), (K.DotGeneral, None)}
QUANT_PATTERNS = [
    *_patterns("int8_per_channel", "int8 per channel: x @ (q.astype(x.dtype) * scale)",
               {(K.Cast, None), (K.DotGeneral, None)}),
    *_patterns("int4_u8", "int4 two nibbles per uint8, (w - zero) * scale per group", _SHIFT),
    *_patterns("int4_u32", "int4 eight nibbles per uint32, (w - zero) * scale per group",
               _SHIFT),
]
