"""Quantized linear layers as DequantMatMul: the reference formulas (ir/reference_quant.py's, as
JAX inference code writes them), traced into generated patterns (passes/patterns.py) and the
replacements that check each packing's types; pattern_table.py appends QUANT_PATTERNS.

  int8 per output channel   x @ (q.astype(x.dtype) * scale)        q int8 [K, N], scale [N]
  int4, two nibbles a byte  w = stack([q & 0xF, q >> 4], 1).reshape(K, N).astype(x.dtype)
                            x @ ((w.reshape(K/G, G, N) - zero[:, None]) * scale[:, None])
                                .reshape(K, N)                     q uint8 [K/2, N],
                                                                   scale, zero [K/G, N]

The group size G is read off the shapes (K / scale.shape[0]) and must be one of GROUP_SIZES
(those MLX's quantized_matmul takes); x may have any leading axes. A formula that differs (another
shift or mask, the nibbles in the other order, a scale broadcast along another axis, an
unsigned int8 weight, a scale of another dtype than x) is left alone.
"""
import jax
import numpy as np

from ..ir.ops import OpKind as K
from ..ir.reference_quant import PACKINGS, dequantize
from .pattern_refs import F32, LEAD
from .patterns import Pattern, Reference

GROUP_SIZES = (32, 64, 128)


def _int8(x, q, scale):
    return (x @ dequantize(q, scale, dtype=x.dtype, packing="int8_per_channel",
                           group_size=q.shape[0]),)


def _int4(x, q, scale, zero):
    group = 2 * q.shape[0] // scale.shape[0]
    return (x @ dequantize(q, scale, zero, dtype=x.dtype, packing="int4_u8",
                           group_size=group),)


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
        if packing == "int8_per_channel":
            return {"x": x, "q": ((8, 6), np.int8), "scale": ((6,), F32), "dy": dy}
        return {"x": x, "q": ((4, 6), np.uint8), "scale": ((2, 6), F32),
                "zero": ((2, 6), F32), "dy": dy}
    return example


def _x_of_dy(bound):
    """x's type from the cotangent's and q's (the gradient reads no x)."""
    if "dy" not in bound or "q" not in bound:
        return None
    (lead, dt), k = bound["dy"], bound["q"][0][0] * (2 if bound["q"][1] == np.uint8 else 1)
    return {"x": (tuple(lead[:-1]) + (k,), dt), **bound}


INT8 = Reference("DequantMatMul int8 per channel: x @ (q.astype(x.dtype) * scale)", _int8,
                 ("x", "q", "scale"), _example("int8_per_channel"), ranks=(2, 3),
                 trigger={(K.Cast, None), (K.DotGeneral, None)})
INT4 = Reference("DequantMatMul int4 two nibbles per uint8, (w - zero) * scale per group",
                 _int4, ("x", "q", "scale", "zero"), _example("int4_u8"), ranks=(2, 3),
                 trigger={(K.Binary, "shift_right_logical"), (K.DotGeneral, None)})


def _replace(packing, transpose=False):
    """DequantMatMul of the bound operands; with transpose (the gradient w.r.t. x) of the
    cotangent dy [..., N]."""
    def replace(b, o, p, root):
        x, q, scale = o["dy" if transpose else "x"], o["q"], o["scale"]
        floats = [o[n] for n in ("scale", "zero") if n in o]
        if x.dtype.kind != "f" or any(v.dtype != x.dtype for v in floats) or q.ndim != 2:
            return None
        if packing == "int8_per_channel":
            group = q.shape[0]
            ok = q.dtype == np.int8 and scale.shape == q.shape[1:]
        else:
            group = 2 * q.shape[0] // max(scale.shape[0], 1)
            ok = q.dtype == np.uint8 and group in GROUP_SIZES and \
                scale.shape == o["zero"].shape == (2 * q.shape[0] // group, q.shape[1])
        k = group * (1 if scale.ndim == 1 else scale.shape[0])
        if not ok or x.shape[-1] != (q.shape[1] if transpose else k):
            return None
        return b.add(K.DequantMatMul, (x, q, *floats), {
            "packing": packing, "bits": PACKINGS[packing], "group_size": group,
            "transpose": transpose})
    return replace


INT8_VJP = Reference("DequantMatMul int8 per channel, joint forward and gradient w.r.t. x",
                     _vjp(_int8), ("x", "q", "scale", "dy"), _example("int8_per_channel"),
                     fill=_x_of_dy, ranks=(2, 3), trigger=INT8.trigger)
INT4_VJP = Reference("DequantMatMul int4 nibbles per uint8, joint forward and gradient w.r.t. x",
                     _vjp(_int4), ("x", "q", "scale", "zero", "dy"), _example("int4_u8"),
                     fill=_x_of_dy, ranks=(2, 3), trigger=INT4.trigger)

QUANT_PATTERNS = [Pattern(INT8, 0, _replace("int8_per_channel")),
                  Pattern(INT4, 0, _replace("int4_u8")),
                  Pattern(INT8_VJP, 1, _replace("int8_per_channel", transpose=True)),
                  Pattern(INT4_VJP, 1, _replace("int4_u8", transpose=True))]
