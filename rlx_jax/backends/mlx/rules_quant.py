"""DequantMatMul on MLX: `mx.quantized_matmul` on the weight re-packed into MLX's layout.

MLX's affine quantization (mlx 0.32) stores a [N, K] weight as w uint32 [N, K·bits/32] (element j
of a word at bits bits·j, the lowest first), scales and biases [N, K/group_size] in x's dtype,
w_deq = scales·w + biases, and `quantized_matmul(x, w, scales, biases, transpose=True)` is
x @ w_deqᵀ; group sizes 32, 64, 128 (bits 4 and 8 used here). The re-packing:

  int4_u8           q uint8 [K/2, N] holds w[2i] | w[2i+1] << 4, so the rows of qᵀ [N, K/2] are
                    already MLX's words, byte by byte (little-endian): w = qᵀ viewed as uint32;
                    scales = scaleᵀ, biases = −(scale·zero)ᵀ
  int8_per_channel  w = (q viewed as uint8) xor 0x80 = q + 128, qᵀ viewed as uint32; scales =
                    scale repeated over K/G groups (G: the largest size of 32, 64, 128 dividing
                    K), biases = −128·scales

The de-quantized values equal the formula's up to its rounding (scale·w + bias instead of
scale·(w − zero)). When q, scale (and zero) are constants of the program the packing is done
once, in NumPy, at lowering time and the packed arrays are captured; otherwise it is part of the
program (a transpose of the bytes and of the scales; no float weight is made). An int8 weight
whose K no group size divides runs the formula (mx ops).
"""
import weakref

import mlx.core as mx
import numpy as np

from ...ir.ops import OpKind as K
from ...ir.reference_quant import constant_weights
from .runtime import to_mx_dtype
from .table import mlx_rule

GROUP_SIZES = (128, 64, 32)


def int8_group(k):
    """The MLX group size an int8 per-channel weight of K rows uses (None: none divides K)."""
    return next((g for g in GROUP_SIZES if k % g == 0), None)


def pack_numpy(packing, q, scale, *zero, group):
    """(w, scales, biases) in MLX's layout, from NumPy arrays (module docstring)."""
    if packing == "int4_u8":
        w = np.ascontiguousarray(q.T).view(np.uint32)
        return w, np.ascontiguousarray(scale.T), np.ascontiguousarray(-(scale * zero[0]).T)
    w = np.ascontiguousarray((q.view(np.uint8) ^ np.uint8(0x80)).T).view(np.uint32)
    scales = np.ascontiguousarray(np.repeat(scale[:, None], q.shape[0] // group, axis=1))
    return w, scales, scales * scale.dtype.type(-128)


def pack_mx(packing, q, scale, *zero, group):
    """pack_numpy's arrays computed by MLX ops (for weights that are arguments)."""
    if packing == "int4_u8":
        w = mx.contiguous(q.T).view(mx.uint32)
        return w, mx.contiguous(scale.T), mx.contiguous(-(scale * zero[0]).T)
    w = mx.contiguous(mx.bitwise_xor(q.view(mx.uint8), mx.array(0x80, mx.uint8)).T)
    scales = mx.repeat(scale[:, None], q.shape[0] // group, axis=1)
    return w.view(mx.uint32), scales, scales * mx.array(-128, scale.dtype)


_PACKED = weakref.WeakKeyDictionary()   # lowering context -> {id(node): packed constants}


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
    group = node.attrs["group_size"] if packing == "int4_u8" else int8_group(q.shape[0])
    if group is None:                          # int8 with K not a multiple of 32: the formula
        return mx.matmul(x, q.astype(x.dtype) * scale)
    packed = packed_constants(ctx, node, group)
    if packed is None:
        packed = pack_mx(packing, q, scale, *zero, group=group)
    return mx.quantized_matmul(x, *packed, transpose=True, group_size=group, bits=bits)
