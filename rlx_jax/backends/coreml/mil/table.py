"""MIL_RULES: OpKind -> rule(ctx, node, *mil_vars), each registered with its claim (the Core ML
backend's claim tables are derived from it), and what the rule families share: MilCtx
(the MIL builder and constant helpers), `refuse` (the error of a configuration MIL cannot
express) and UNARY_FNS (Activation fns composed by
a family of their own, which the Activation rule dispatches to). The families (mil_*.py) import
this module; mil/program.py, the program builder, loads the families."""
import numpy as np

from ....errors import RefusalError
from ....tables import LoweringTable, rule_table
from . import legality

MIL_RULES = LoweringTable("coreml")
mil_rule = MIL_RULES.rule
# Activation fn name -> rule(ctx, node, x) for the fns a family composes (mil/special.py)
UNARY_FNS, unary_fn = rule_table("MIL unary fns")


# Iota, constants and broadcasts of constants become MIL consts (coremltools infers the value of
# every op whose inputs are consts, and writes the results into the package as weights): one
# above this many bytes is refused rather than built in memory (a node refused goes to the host
# under fallback="host")
CONST_LIMIT_BYTES = 2 ** 31


def check_const_size(shape, dtype, what):
    """Refuses a constant of `shape` and numpy `dtype` above CONST_LIMIT_BYTES."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if size > CONST_LIMIT_BYTES:
        raise RefusalError(
            f"{what} of shape {tuple(shape)} would be a Core ML constant of {size / 2 ** 30:.1f} "
            f"GiB (the package holds such values as weights; at most {CONST_LIMIT_BYTES >> 30} "
            f"GiB here); compute it from the program's inputs, or in pieces")


class MilCtx:
    """What rules need: the MIL builder, the opset, and small helpers for constants."""

    def __init__(self, mb, opset):
        self.mb = mb
        self.opset = opset
        self.symbols = {}       # symbolic dimension name -> its int32[1] size (mil/dynamic.py)

    def const(self, value, dtype=None):
        """A MIL const of exactly `dtype` (numpy); Python ints become int32."""
        arr = np.asarray(value, dtype=dtype)
        check_const_size(arr.shape, arr.dtype, "a value")
        if arr.dtype == np.int64:
            arr = arr.astype(np.int32)
        elif arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        return self.mb.const(val=arr)

    def scalar(self, value, like_dtype):
        return self.const(np.asarray(value, dtype=legality.mil_np_dtype(like_dtype)))

    def np_dtype(self, var):
        from coremltools.converters.mil.mil import types
        return np.dtype(types.nptype_from_builtin(var.dtype))

    def like(self, value, var):
        """A scalar const of `var`'s dtype."""
        return self.mb.const(val=np.asarray(value, dtype=self.np_dtype(var)))

    def ints(self, xs):
        """A shape-like int32 operand: a constant, or computed in the program where an entry
        is a symbolic dimension (mil/dynamic.py)."""
        from .dynamic import ints
        return ints(self, xs)


def refuse(node, what, todo="use backend='xla' or 'mlx' for this op"):
    """Raises the RefusalError of a `node` configuration MIL cannot express."""
    raise RefusalError(f"Core ML cannot express {node.kind.name}: {what}; {todo}")


