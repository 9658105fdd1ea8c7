"""The decomposition of DequantMatMul: the dequantization and the matmul of the reference
formula (ir/reference_quant.py), translated, so a backend without the kind computes what the
user's formula computed, operation for operation; int4 nibbles of bytes are unpacked by int32
arithmetic (the same values), which every backend, Core ML included, computes."""
from ...ir.ops import OpKind as K
from ...ir.reference_quant import dequant_matmul, unpack_int4_int32
from . import decomp
from .formulas import inline


@decomp(K.DequantMatMul)
def _dequant_matmul(b, node, *operands):
    unpack = unpack_int4_int32 if node.attrs["packing"] == "int4_u8" else None
    return inline(b, dequant_matmul, operands, unpack=unpack, **node.attrs)
