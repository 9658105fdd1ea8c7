"""DequantMatMul in MIL (ir/reference_quant.py's semantics).

When q, scale (and zero) are constants of the program and the deployment target is iOS18 /
macOS15 or later, the weight is one `constexpr_blockwise_shift_scale` (Core ML keeps it
quantized in the package and de-quantizes it at load or run time): output = scale·(data −
offset) per block, block sizes data.shape / scale.shape, computed in the scale's dtype, which is
the formula's (w − zero)·scale and q·scale operation for operation:

  int4_u8, int4_u32 data uint4 [K, N] (the nibbles, low first), scale and offset (zero) [K/G, N]
  int8_per_channel  data int8 [K, N], scale [1, N], no offset

then one matmul (transpose_y for a transposed DequantMatMul). Before iOS18 a constant int8
per-channel weight is one `constexpr_affine_dequantize` (iOS16: scale·(data − zero_point) along
axis 1, zero_point 0: q·scale again). Otherwise (weights that are arguments, int4 before iOS18)
the formula is composed: int4 nibbles unpacked as
hi = floor_div(q, 16), lo = q − 16·hi (MIL has no bitwise ops; the bytes are int32 in the
program), stack, reshape, cast, sub, mul, reshape and matmul; int8 cast, mul and matmul. A
uint32 weight that is not a constant (int4_u32; recognition turns constant ones into bytes) is
refused: Core ML computes integers in int32 only, so the node runs on the host.
"""
import numpy as np

from ....ir.ops import OpKind as K
from ....ir.reference_quant import UNPACK, constant_weights
from .nn_attn import SDPA_FIRST_OPSET
from .table import mil_rule, refuse

BLOCKWISE_FIRST_OPSET = SDPA_FIRST_OPSET        # ct.target.iOS18 / macOS15


def _constexpr_weight(ctx, node, values):
    from coremltools.converters.mil.mil import types
    q, scale, *zero = values
    if node.attrs["packing"] in UNPACK:
        data = np.asarray(UNPACK[node.attrs["packing"]](q)).astype(types.np_uint4_dtype)
        return ctx.mb.constexpr_blockwise_shift_scale(data=data, scale=scale, offset=zero[0])
    return ctx.mb.constexpr_blockwise_shift_scale(data=q, scale=scale[None, :])


def _composed_weight(ctx, node, q, scale, *zero):
    if node.attrs["packing"] == "int4_u32":
        refuse(node, "its weight is uint32 words (Core ML computes integers in int32 only)",
               "pass the weight as uint8 bytes (int4_u8) or close over it (a constant)")
    mb = ctx.mb
    dt = ctx.np_dtype(scale)
    dtype = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32"}[dt]
    if node.attrs["packing"] == "int8_per_channel":
        return mb.mul(x=mb.cast(x=q, dtype=dtype), y=scale)
    k2, n = node.inputs[1].shape
    group = node.attrs["group_size"]
    sixteen = ctx.const(np.int32(16))
    hi = mb.floor_div(x=q, y=sixteen)
    lo = mb.sub(x=q, y=mb.mul(x=hi, y=sixteen))
    w = mb.reshape(x=mb.stack(values=[lo, hi], axis=1), shape=ctx.ints([2 * k2, n]))
    w = mb.reshape(x=mb.cast(x=w, dtype=dtype), shape=ctx.ints([2 * k2 // group, group, n]))
    axis = ctx.ints([1])
    w = mb.sub(x=w, y=mb.expand_dims(x=zero[0], axes=axis))
    w = mb.mul(x=w, y=mb.expand_dims(x=scale, axes=axis))
    return mb.reshape(x=w, shape=ctx.ints([2 * k2, n]))


@mil_rule(K.DequantMatMul)
def _dequant_matmul(ctx, node, x, q, scale, *zero):
    """A constexpr weight and a matmul (constant weights: iOS18+, or int8 on any target), else
    the composition (module docstring)."""
    values = constant_weights(node)
    if values is not None and getattr(ctx.opset, "value", ctx.opset) >= BLOCKWISE_FIRST_OPSET:
        w = _constexpr_weight(ctx, node, values)
    elif values is not None and node.attrs["packing"] == "int8_per_channel":
        w = ctx.mb.constexpr_affine_dequantize(quantized_data=values[0], zero_point=np.int8(0),
                                               scale=values[1], axis=1)
    else:
        w = _composed_weight(ctx, node, q, scale, *zero)
    return ctx.mb.matmul(x=x, y=w, transpose_y=node.attrs["transpose"])
