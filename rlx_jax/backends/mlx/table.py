"""MLX_RULES: OpKind -> rule(ctx, node, *mx_arrays), each registered with its claim (the MLX
backend's claim tables are derived from it), and helpers shared by the rule families."""
import mlx.core as mx
import numpy as np

from ...errors import RefusalError
from ...ir import identities
from ...tables import LoweringTable
from .runtime import to_mx_dtype

MLX_RULES = LoweringTable("mlx")
mlx_rule = MLX_RULES.rule

HALF = (mx.float16, mx.bfloat16)
FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)
INEXACT = FLOATS + (mx.complex64,)      # what mx.matmul and true division take
UNSIGNED = {mx.uint8: 8, mx.uint16: 16, mx.uint32: 32, mx.uint64: 64}
SIGNED = {mx.int8: 8, mx.int16: 16, mx.int32: 32, mx.int64: 64}
TO_UNSIGNED = {mx.int8: mx.uint8, mx.int16: mx.uint16, mx.int32: mx.uint32,
               mx.int64: mx.uint64, mx.float16: mx.uint16, mx.bfloat16: mx.uint16,
               mx.float32: mx.uint32, mx.float64: mx.uint64, **{u: u for u in UNSIGNED}}
TO_SIGNED = {mx.uint8: mx.int8, mx.uint16: mx.int16, mx.uint32: mx.int32,
             mx.uint64: mx.int64, mx.float16: mx.int16, mx.bfloat16: mx.int16,
             mx.float32: mx.int32, mx.float64: mx.int64, **{s: s for s in SIGNED}}


def is_float(x):
    return x.dtype in FLOATS


def is_inexact(x):
    """float or complex64."""
    return x.dtype in INEXACT


def out_dtype(node, i=0):
    return to_mx_dtype(node.outputs[i].dtype, f"output of {node.kind.name}")


def full(shape, value, dtype):
    return mx.full(tuple(shape), mx.array(value, dtype=dtype))


def scalar(value, dtype):
    return mx.array(value, dtype=dtype)


def identity(fn, dtype):
    """The identity of reduction `fn` in mx dtype `dtype`, a Python scalar (ir/identities.py)."""
    return identities.identity(fn, np.dtype(mx_np_name(dtype))).item()


def lowest(dtype):
    return identity("max", dtype)


def highest(dtype):
    return identity("min", dtype)


def mx_np_name(dtype):
    return str(dtype).rsplit(".", 1)[-1].replace("bool_", "bool")


def bits(dtype):
    return {mx.bool_: 8, mx.float16: 16, mx.bfloat16: 16, mx.float32: 32, mx.float64: 64,
            **UNSIGNED, **SIGNED}[dtype]


def index_dtype(size):
    return mx.int32 if size < 2 ** 31 else mx.int64


def unsupported(node, what):
    raise RefusalError(f"backend 'mlx' cannot lower {node.kind.name}: {what}. "
                        f"Use backend='xla' for this program, or rewrite this op.")


def batched_matmul(x, y, dt):
    """[B, M, K] x [B, K, N] -> [B, M, N] in dtype dt (integers by broadcast-multiply-sum;
    booleans as any-of-and). The contraction of DotGeneral, MatMul and the patches form of Conv."""
    if dt in INEXACT:
        return mx.matmul(x.astype(dt), y.astype(dt))
    if dt == mx.bool_:
        return mx.any(mx.logical_and(x[..., None], y[:, None]), axis=2)
    return mx.sum(x.astype(dt)[..., None] * y.astype(dt)[:, None], axis=2).astype(dt)
