"""Reference semantics of DequantMatMul (rlx_jax extension semantics): a matmul with a weight
stored quantized, dequantized first, as JAX inference code writes it
(passes/pattern_quant.py recognises these formulas).

    operands  x [..., K] (float), q (the stored weight), scale (x's dtype), zero (packed int4)
    attrs     packing, bits, group_size (rows of K sharing a scale / zero), transpose
    result    x @ w, or with transpose x @ wᵀ (x [..., N]: the gradient of x @ w w.r.t. x)

packing "int8_per_channel" (bits 8, group_size K): q int8 [K, N], scale [N] per output channel,

    x @ (q.astype(x.dtype) * scale)

packing "int4_u8" (bits 4, group_size G): q uint8 [K/2, N], two nibbles per byte along K, the low
nibble first (q[i] = w[2i] | w[2i+1] << 4); scale and zero [K/G, N], one per group of G rows,

    w = stack([q & 0xF, q >> 4], axis=1).reshape(K, N).astype(x.dtype)
    x @ ((w.reshape(K/G, G, N) - zero[:, None]) * scale[:, None]).reshape(K, N)

packing "int4_u32" (bits 4, group_size G): q uint32 [K/8, N], eight nibbles per word along K, the
lowest first (w[8i + j] = q[i] >> 4j & 0xF), scale and zero as for int4_u8,

    w = ((q[:, None, :] >> jnp.arange(8, dtype=uint32)[None, :, None] * 4) & 0xF)
        .reshape(K, N).astype(x.dtype)
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

from .ops import OpKind as K

PACKINGS = {"int8_per_channel": 8, "int4_u8": 4, "int4_u32": 4}       # packing -> bits
PER_WORD = {"int8_per_channel": 1, "int4_u8": 2, "int4_u32": 8}     # values of K per element of q


def unpack_int4_u8(q):
    """uint8 [K/2, N] -> uint8 [K, N], the low nibble of each byte first."""
    k2, n = q.shape
    return jnp.stack([q & 0xF, q >> 4], axis=1).reshape(2 * k2, n)


def unpack_int4_u32(q):
    """uint32 [K/8, N] -> uint32 [K, N], the lowest nibble of each word first."""
    k8, n = q.shape
    shifts = jnp.arange(8, dtype=jnp.uint32) * 4
    return ((q[:, None, :] >> shifts[None, :, None]) & 0xF).reshape(8 * k8, n)


UNPACK = {"int4_u8": unpack_int4_u8, "int4_u32": unpack_int4_u32}


def unpack_int4_int32(q):
    """unpack_int4_u8's nibbles as int32, by arithmetic (for targets without uint8 or bitwise
    ops: Core ML): hi = q // 16, lo = q − 16·hi."""
    k2, n = q.shape
    q = q.astype(jnp.int32)
    hi = lax.div(q, jnp.int32(16))
    return jnp.stack([q - hi * 16, hi], axis=1).reshape(2 * k2, n)


def dequantize(q, scale, *zero, dtype, packing, group_size, unpack=None):
    """The float [K, N] weight of a DequantMatMul's q, scale (and zero) in `dtype`; `unpack`
    the int4 nibbles if not UNPACK's (the same values either way)."""
    if packing == "int8_per_channel":
        return q.astype(dtype) * scale
    w = (unpack or UNPACK[packing])(q).astype(dtype)
    k, n = w.shape
    w = (w.reshape(k // group_size, group_size, n) - zero[0][:, None, :]) * scale[:, None, :]
    return w.reshape(k, n)


def constant_weights(node):
    """The NumPy values of a DequantMatMul node's q, scale (and zero) when all are Constants of
    its graph (a backend packs them once, when lowering), else None."""
    ins = node.inputs[1:]
    if all(v.node is not None and v.node.kind is K.Constant for v in ins):
        return [np.asarray(v.node.attrs["value"]) for v in ins]
    return None


def dequant_matmul(x, q, scale, *zero, packing, bits, group_size, transpose, unpack=None):
    """DequantMatMul (module docstring): x @ w (x @ wᵀ with transpose), w = dequantize(q,
    scale, zero)."""
    w = dequantize(q, scale, *zero, dtype=x.dtype, packing=packing, group_size=group_size,
                   unpack=unpack)
    return x @ (w.T if transpose else w)


QUANT_REFERENCE = {
    K.DequantMatMul: dequant_matmul,
}
