"""What Core ML tensors can hold, checked before lowering, and the model-boundary conversions.

Core ML programs compute in float32, float16, int32 and bool, at rank <= 5 and with no
zero-sized dimension. float64, bfloat16, int64 and unsigned 32/64-bit values are refused with
a LoweringError naming the node. 8/16-bit integers are accepted only where they are converted
with a Cast straight away (image bytes -> float): they travel widened to int32, which is exact.
Model inputs/outputs: bool travels as int32 and rank-0 values as shape (1,); the host side
converts back, so the user sees JAX's dtypes and shapes.
"""
import numpy as np

from ...errors import LoweringError
from ...ir.interpret import where
from ...ir.ops import OpKind as K

MAX_RANK = 5
MIL_DTYPES = frozenset(np.dtype(d) for d in ("float32", "float16", "int32", "bool"))
WIDENED = frozenset(np.dtype(d) for d in ("int8", "uint8", "int16", "uint16"))
_TODO = {
    "float64": "compute in float32 (leave jax_enable_x64 off), or use backend='xla'",
    "int64": "use int32 indices (leave jax_enable_x64 off), or use backend='xla'",
    "bfloat16": "cast to float16 or float32 before this op, or use backend='mlx'",
}


def mil_np_dtype(dtype):
    """The numpy dtype a value of IR dtype `dtype` has inside the MIL program."""
    dtype = np.dtype(dtype)
    return np.dtype(np.int32) if dtype in WIDENED else dtype


def _mil_type(dtype):
    from coremltools.converters.mil.mil import types
    return {"float32": types.fp32, "float16": types.fp16, "int32": types.int32,
            "bool": types.bool}[np.dtype(dtype).name]


def _refuse(v, node, why, todo):
    raise LoweringError(
        f"Core ML cannot hold {v.type_str()} produced by {node.kind.name}: {why}\n"
        f"  in `{node.text()}`{where(node)}\n  What to do: {todo}")


def check_graph(graph):
    """Refuses what Core ML cannot represent; returns the Boundary of the program."""
    users = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(v.id, []).append(n)
    outputs = {v.id for v in graph.outputs}
    for n in graph.nodes:
        for v in n.outputs:
            if v.ndim > MAX_RANK:
                _refuse(v, n, f"rank {v.ndim} > {MAX_RANK}",
                        "reshape to rank <= 5 (merge leading axes), or use backend='mlx'")
            if 0 in v.shape:
                _refuse(v, n, "zero-sized dimension", "avoid empty arrays, or use backend='xla'")
            if v.dtype in MIL_DTYPES:
                continue
            if v.dtype in WIDENED and n.kind in (K.Input, K.Constant) and v.id not in outputs \
                    and all(u.kind is K.Cast for u in users.get(v.id, ())):
                continue
            if v.dtype in WIDENED:
                why = f"{v.dtype.name} arithmetic has no Core ML type (only int32)"
                todo = f"cast {v.dtype.name} values to int32/float32 right where they enter"
            else:
                why = f"Core ML has no {v.dtype.name} tensors"
                todo = _TODO.get(v.dtype.name, "use float32/int32, or backend='xla'")
            _refuse(v, n, why, todo)
    return Boundary()


class Boundary:
    """Model input/output types and the host-side conversions around them."""

    @staticmethod
    def model_dtype(v):
        return np.dtype(np.int32) if v.dtype == np.bool_ or v.dtype in WIDENED else v.dtype

    @staticmethod
    def model_shape(v):
        return v.shape if v.shape else (1,)

    def mil_type(self, v, model=True):
        return _mil_type(self.model_dtype(v) if model else mil_np_dtype(v.dtype))

    def enter(self, ctx, v, var):
        """Inside the program: model input var -> the value the IR expects."""
        mb = ctx.mb
        if not v.shape:
            var = mb.reshape(x=var, shape=np.zeros((0,), np.int32))
        if v.dtype == np.bool_:
            var = mb.cast(x=var, dtype="bool")
        return var

    def leave(self, ctx, v, var, name):
        """Inside the program: the IR output value -> the named model output."""
        mb = ctx.mb
        if v.dtype == np.bool_:
            var = mb.cast(x=var, dtype="int32")
        if not v.shape:
            return mb.reshape(x=var, shape=np.ones((1,), np.int32), name=name)
        return mb.identity(x=var, name=name)

    def to_model(self, v, x):
        """Host side: a user array -> the model input array."""
        return np.ascontiguousarray(np.asarray(x).astype(self.model_dtype(v), copy=False)
                                    .reshape(self.model_shape(v)))

    @staticmethod
    def from_model(v, y):
        """Host side: a model output array -> the IR value's dtype and shape."""
        y = np.asarray(y).reshape(v.shape)
        return y.astype(v.dtype, copy=False)
