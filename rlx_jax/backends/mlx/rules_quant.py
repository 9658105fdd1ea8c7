"""DequantMatMul on MLX: `mx.quantized_matmul` on the weight re-packed into MLX's layout.

MLX's affine quantization (mlx 0.32) stores a [N, K] weight as w uint32 [N, K·bits/32] (element j
of a word at bits bits·j, the lowest first), scales and biases [N, K/group_size] in x's dtype,
w_deq = scales·w + biases, and `quantized_matmul(x, w, scales, biases, transpose=True)` is
x @ w_deqᵀ (transpose=False: x @ w_deq, a transposed DequantMatMul, the gradient w.r.t. x);
group sizes 32, 64, 128 (bits 4 and 8 used here). The re-packing:

  int4_u8           q uint8 [K/2, N] holds w[2i] | w[2i+1] << 4, so the rows of qᵀ [N, K/2] are
                    already MLX's words, byte by byte (little-endian): w = qᵀ viewed as uint32;
                    scales = scaleᵀ, biases = −(scale·zero)ᵀ
  int4_u32          q uint32 [K/8, N] holds the nibbles of K lowest first, as MLX's words do:
                    w = qᵀ; scales and biases as for int4_u8
  int8_per_channel  w = (q viewed as uint8) xor 0x80 = q + 128, qᵀ viewed as uint32; scales =
                    scale repeated over K/G groups (G: the largest size of 32, 64, 128 dividing
                    K), biases = −128·scales

The de-quantized values equal the formula's up to its rounding (scale·w + bias instead of
scale·(w − zero)). Constant weights are packed once, in NumPy, at lowering time and captured;
weights that are arguments of the program are packed before the call, once per weight buffer
(prepack.py); weights computed in the program are packed in it (a transpose of the bytes and
of the scales; no float weight is made). An int8 weight whose K no group size divides runs the
formula (mx ops).
"""
import weakref

import mlx.core as mx
import numpy as np

from ...ir.ops import OpKind as K
from ...ir.reference_quant import constant_weights
from .runtime import to_mx_dtype
from .table import mlx_rule

GROUP_SIZES = (128, 64, 32)


def mlx_group(node):
    """The MLX group size of a DequantMatMul: int4's own; for an int8 per-channel weight of K
    rows the largest of GROUP_SIZES dividing K (None: none does)."""
    if node.attrs["packing"] != "int8_per_channel":
        return node.attrs["group_size"]
    return next((g for g in GROUP_SIZES if node.inputs[1].shape[0] % g == 0), None)


def pack_numpy(packing, q, scale, *zero, group):
    """(w, scales, biases) in MLX's layout, from NumPy arrays (module docstring)."""
    if packing != "int8_per_channel":
        w = np.ascontiguousarray(q.T).view(np.uint32)
        return w, np.ascontiguousarray(scale.T), np.ascontiguousarray(-(scale * zero[0]).T)
    w = np.ascontiguousarray((q.view(np.uint8) ^ np.uint8(0x80)).T).view(np.uint32)
    scales = np.ascontiguousarray(np.repeat(scale[:, None], q.shape[0] // group, axis=1))
    return w, scales, scales * scale.dtype.type(-128)


def pack_mx(packing, q, scale, *zero, group):
    """pack_numpy's arrays computed by MLX ops (for weights that are arguments)."""
    if packing != "int8_per_channel":
        w = mx.contiguous(q.T).view(mx.uint32)
        return w, mx.contiguous(scale.T), mx.contiguous(-(scale * zero[0]).T)
    w = mx.contiguous(mx.bitwise_xor(q.view(mx.uint8), mx.array(0x80, mx.uint8)).T)
    scales = mx.repeat(scale[:, None], q.shape[0] // group, axis=1)
    return w.view(mx.uint32), scales, scales * mx.array(-128, scale.dtype)


# lowering context -> {id(node): packed constants}
_PACKED: weakref.WeakKeyDictionary[object, dict[int, object]] = weakref.WeakKeyDictionary()


def packed_constants(ctx, node, group):
    """The packed constant weights of `node` (packed once per lowering; None when they are not
    constants)."""
    memo = _PACKED.setdefault(ctx, {})
    if id(node) not in memo:
        values = constant_weights(node)
        if values is None:
            return None
        dt = to_mx_dtype(node.inputs[0].dtype)
        w, scales, biases = pack_numpy(node.attrs["packing"], *values, group=group)
        memo[id(node)] = (mx.array(w), mx.array(scales, dtype=dt), mx.array(biases, dtype=dt))
    return memo[id(node)]


@mlx_rule(K.DequantMatMul)
def _dequant_matmul(ctx, node, x, q, scale, *zero):
    """x @ the de-quantized weight: one quantized_matmul (module docstring)."""
    packing, bits = node.attrs["packing"], node.attrs["bits"]
    group = mlx_group(node)
    transpose = node.attrs["transpose"]
    if group is None:                          # int8 with K not a multiple of 32: the formula
        w = q.astype(x.dtype) * scale
        return mx.matmul(x, w.T if transpose else w)
    if id(node) in ctx.prepacked:              # packed before the call (prepack.py)
        packed = (q, scale, zero[0] if zero else scale * mx.array(-128, scale.dtype))
    else:
        packed = packed_constants(ctx, node, group) or pack_mx(packing, q, scale, *zero,
                                                               group=group)
    return mx.quantized_matmul(x, *packed, transpose=not transpose, group_size=group, bits=bits)
