"""What Core ML tensors can hold, checked before lowering, and the model-boundary conversions.

Core ML programs compute in float32, float16, int32 and bool, at rank <= 5. float64 and
bfloat16 are refused with a LoweringError naming the node. Other integer dtypes (int8/16/64,
uint8/16/32) are narrowed to int32 only where an interval analysis proves every value fits
both int32 and the value's own dtype (so no wrap-around can differ): e.g. uint8 image inputs,
iota/index arithmetic in gradients. Zero-sized values never get here: the backend folds them
out of the graph first (passes/empty.py); one left at the model boundary is refused.
Nodes inside control-flow regions (If / While / Scan bodies) are checked like top-level ones; a
zero-size value there is refused (only top-level ones are folded away), and so is a narrowed
integer there (the interval analysis proves no bounds inside regions).
Model inputs/outputs: bool and narrowed integers travel as int32, rank-0 values as shape (1,);
the host side converts back, so the user sees JAX's dtypes and shapes. Each model output is the
var of the op that computes it, renamed (output_var): an identity only for an input returned as
it is or a value returned twice. A uint32/int64/uint64 program input is taken to hold
int32-range values (intervals.input_bounds), and every call's argument is checked against that
before it is narrowed (Boundary.to_model).
"""
import jax.numpy as jnp
import numpy as np

from ....ir.dims import symbolic_shape
from ....errors import ArgumentRangeError, RefusalError
from ....ir.interpret import where
from ....ir.ops import OpKind
from ..passes.intervals import input_bounds, intervals

MAX_RANK = 5
MIL_DTYPES = frozenset(np.dtype(d) for d in ("float32", "float16", "int32", "bool"))
I32 = np.iinfo(np.int32)
_TODO = {
    "float64": "compute in float32 (leave jax_enable_x64 off), or use backend='xla'",
    "bfloat16": "pass the Core ML option bfloat16='float32' (or 'float16') to compute "
                "bfloat16 values in that dtype, cast to float32 before this op, or use "
                "backend='mlx'",
}


BF16 = np.dtype(jnp.bfloat16)
F32 = np.dtype(np.float32)


def mil_np_dtype(dtype):
    """The numpy dtype a value of IR dtype `dtype` has inside the MIL program (bfloat16 only
    at the model boundary, where it travels as float32: boundary_bf16)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.int32) if dtype.kind in "iu" else F32 if dtype == BF16 else dtype


def boundary_bf16(graph):
    """The ids of the bfloat16 values Core ML holds as float32 at the model boundary: a graph
    input read only by Casts (to a Core ML dtype) and a graph output made by a Cast and read by
    nothing else. The host converts them (exactly in; rounded to nearest even out, as the Cast
    rounds), so the Casts on the device have nothing left to do."""
    users = graph.readers()
    outs = {v.id for v in graph.outputs}
    ins = {v.id for v in graph.inputs if v.dtype == BF16 and users.get(v.id) and all(
        u.kind is OpKind.Cast and mil_np_dtype(u.attrs["dtype"]) in MIL_DTYPES and
        np.dtype(u.attrs["dtype"]).kind == "f" for u in users[v.id])}
    made = {v.id for n in graph.nodes if n.kind is OpKind.Cast for v in n.outputs
            if v.dtype == BF16 and v.id in outs and not users.get(v.id)
            and n.inputs[0].dtype.kind == "f" and n.inputs[0].dtype != BF16}
    return ins | made


def mil_type(dtype):
    """The MIL builtin type of numpy `dtype`, one of MIL_DTYPES (coremltools' own mapping)."""
    from coremltools.converters.mil.mil import types
    return types.numpy_type_to_builtin_type(np.dtype(dtype))


def mil_dtype_name(dtype):
    """The name MIL ops take for numpy `dtype` (`mb.cast(dtype=...)`: "fp32", "fp16", "int32",
    "bool")."""
    from coremltools.converters.mil.mil import types
    return types.builtin_to_string(mil_type(dtype))


def _refuse(v, node, why, todo):
    raise RefusalError(
        f"Core ML cannot hold {v.type_str()} produced by {node.kind.name}: {why}\n"
        f"  in `{node.text()}`{where(node)}\n  What to do: {todo}")


def _fits(v, bound):
    if bound is None:
        return False
    info = np.iinfo(v.dtype)
    lo, hi = bound
    return max(info.min, I32.min) <= lo and hi <= min(info.max, I32.max)


def check_graph(graph):
    """Refuses what Core ML cannot represent; returns the Boundary of the program."""
    for v, n, why, todo in problems(graph):
        _refuse(v, n, why, todo)
    return Boundary()


def problems(graph):
    """(value, node, why, what to do) for every value of `graph` (region values included)
    Core ML cannot hold."""
    bounds, bf16 = None, None
    boundary = {v.id for v in graph.inputs} | {v.id for v in graph.outputs}
    top = {id(n) for n in graph.nodes}
    for n in graph.walk():             # region nodes (If / While / Scan bodies) too
        for v in n.outputs:
            if v.ndim > MAX_RANK:
                yield (v, n, f"rank {v.ndim} > {MAX_RANK}",
                       "reshape to rank <= 5 (merge leading axes), or use backend='mlx'")
                continue
            if 0 in v.shape and id(n) not in top:
                yield (v, n, "a zero-size value inside a control-flow region (Core ML has "
                       "no empty tensors, and only top-level values are folded away)",
                       "avoid the empty value inside the loop or branch, or use "
                       "backend='xla'")
                continue
            if 0 in v.shape and v.id in boundary:
                yield (v, n, "Core ML model inputs/outputs cannot be empty",
                       "fold zero-size values first (backends/coreml/passes/empty.py: fold_empty), "
                       "or use backend='xla'")
                continue
            if v.dtype in MIL_DTYPES:
                continue
            if v.dtype == BF16:
                bf16 = boundary_bf16(graph) if bf16 is None else bf16
                if v.id in bf16:
                    continue
            if v.dtype.kind in "iu":
                bounds = bounds if bounds is not None else intervals(graph)
                b = bounds.get(v.id)       # none for region values: nothing proven there
                if _fits(v, b):
                    continue
                yield (v, n, f"Core ML computes integers in int32 only, and these "
                       f"{v.dtype.name} values are not provably in int32 range without "
                       f"wrap-around (bounds {list(b) if b else 'unknown'})",
                       "cast to int32 (or float32) where the values enter, or use "
                       "backend='xla'")
                continue
            yield (v, n, f"Core ML has no {v.dtype.name} tensors",
                   _TODO.get(v.dtype.name, "use float32/int32, or backend='xla'"))


def output_var(mb, var, name, taken):
    """`var` as the function output `name`. Core ML names a model output after the var the
    function returns, so the var itself is renamed, as coremltools' own frontends name their
    outputs (`replace_block_output_var` renames a var that takes a function output's place).
    An identity is made only where the var cannot take the name: a function input (its name is
    the model input's) or a var that is already an earlier output (one var, one name; a model's
    output names are unique). `taken`: {id(var)} of those vars, updated here."""
    if id(var) in taken:
        var = mb.identity(x=var, name=name)
    else:
        var.name = name
    taken.add(id(var))
    return var


class Boundary:
    """Model input/output types and the host-side conversions around them."""

    @staticmethod
    def model_dtype(v):
        """int32 for bool and narrowed integers, float32 for bfloat16 (boundary_bf16)."""
        return np.dtype(np.int32) if v.dtype == np.bool_ else mil_np_dtype(v.dtype)

    @staticmethod
    def model_shape(v):
        return v.shape if v.shape else (1,)

    def mil_type(self, v, model=True):
        return mil_type(self.model_dtype(v) if model else mil_np_dtype(v.dtype))

    def enter(self, ctx, v, var):
        """Inside the program: model input var -> the value the IR expects."""
        mb = ctx.mb
        if not v.shape:
            var = mb.reshape(x=var, shape=np.zeros((0,), np.int32))
        if v.dtype == np.bool_:
            var = mb.cast(x=var, dtype="bool")
        return var

    def leave(self, ctx, v, var, name, taken):
        """Inside the program: the IR output value -> the model output `name`, made by the op
        that computes it: the cast (bool travels as int32) or reshape (rank 0 as shape (1,)) is
        built with that name, any other result is renamed (output_var)."""
        mb = ctx.mb
        if v.dtype == np.bool_:
            var = mb.cast(x=var, dtype="int32", **({"name": name} if v.shape else {}))
        if not v.shape:
            var = mb.reshape(x=var, shape=np.ones((1,), np.int32), name=name)
        return output_var(mb, var, name, taken)

    def to_model(self, v, x, what=None):
        """Host side: a user array -> the model input array. An integer input narrowed to int32
        must hold values within the bounds the program was built for (intervals.input_bounds);
        `what` names the argument in the error raised otherwise."""
        x = np.asarray(x)
        if v.dtype.kind in "iu" and x.size:
            self.check_range(v, x, what or f"input {v.node.attrs.get('index', '?')}")
        x = x.astype(self.model_dtype(v), copy=False)
        return np.ascontiguousarray(x if v.shape else x.reshape(1))    # rank 0 travels as (1,)

    @staticmethod
    def check_range(v, x, what):
        """Raises ArgumentRangeError when the array `x` for the integer input `v` holds values
        outside the input's bounds (intervals.input_bounds); `what` names the argument."""
        lo, hi = input_bounds(v)
        info = np.iinfo(v.dtype)
        if (lo, hi) == (info.min, info.max):
            return                        # every value of the dtype fits
        got = (int(x.min()), int(x.max()))
        if lo <= got[0] and got[1] <= hi:
            return
        dt = v.dtype.name
        raise ArgumentRangeError(
            f"argument {what} of the Core ML program ({dt}{list(x.shape)}) holds values in "
            f"[{got[0]}, {got[1]}], outside the [{lo}, {hi}] the program was built for: Core ML "
            f"computes integers in int32, and {dt} arguments are narrowed to int32\n"
            f"  What to do: pass values within [{lo}, {hi}] (or cast before the call: to "
            f"float32, or to int32 where the values fit), or use backend='xla' or 'mlx', which "
            f"compute in {dt}")

    @staticmethod
    def from_model(v, y):
        """Host side: a model output array -> the IR value's dtype and shape."""
        y = np.asarray(y)
        y = y if symbolic_shape(v.shape) else y.reshape(v.shape)   # flexible: sized by the run
        return y.astype(v.dtype, copy=False)
