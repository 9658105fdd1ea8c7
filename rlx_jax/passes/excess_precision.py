"""XLA's excess precision for bfloat16, where a program widens a result: a `Cast` to float32
of a bfloat16 elementwise op is the op computed in float32 on its widened operands, with no
rounding to bfloat16 in between.

XLA's CPU backend computes a bfloat16 elementwise op in float32 and rounds it to bfloat16;
where the next instruction converts it back to float32 (`jnp.sum` of a bfloat16 product, whose
reduction JAX runs in float32), `xla_allow_excess_precision` (on by default) drops that round
trip, so `x.astype(f32)` of `a * b` is the float32 product itself. Measured on JAX 0.10's CPU
backend, 10,000 draws each: `(a * b).astype(jnp.float32)` of bfloat16 a, b equals the
unrounded float32 product for add, sub, mul, div and exp / tanh; an op feeding another
bfloat16 op stays rounded (`((a * b) * b).astype(f32)` rounds a * b); float16 ops, which the
CPU computes natively, stay rounded too. A backend that rounds each op (MLX) gives the
trapezoid rule of bfloat16 samples one rounding of the product apart from `jax.jit`, up to
0.09 on a value of 0.8. `widen_casts` rewrites each such Cast into the op at float32, so the
backend computes what `jax.jit` computes (the trapezoid rule: bit for bit, 200 draws); the
bfloat16 op stays where something else reads it.
"""
import numpy as np

from ..ir.ops import OpKind as K
from ..ir.rewrite import dce, rewrite
from .patterns import BF16

F32 = np.dtype(np.float32)
BINARY = frozenset({"add", "sub", "mul", "div", "pow", "max", "min", "atan2"})
UNARY = frozenset({"abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cbrt", "cos",
                   "cosh", "digamma", "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "lgamma",
                   "log", "log1p", "neg", "rsqrt", "sigmoid", "sin", "sinh", "sqrt", "square",
                   "tan", "tanh"})


def _widens(node):
    """Whether `node` is a Cast to float32 of a bfloat16 elementwise op XLA computes wider."""
    if node.kind is not K.Cast or node.out.dtype != F32:
        return False
    op = node.inputs[0].node
    if op is None or len(op.outputs) != 1 or op.out.dtype != BF16:
        return False
    fns = {K.Binary: BINARY, K.Activation: UNARY}.get(op.kind, ())
    return op.attrs.get("fn") in fns and all(v.dtype == op.out.dtype for v in op.inputs)


def widen_casts(graph):
    """`graph` with every widening Cast of a bfloat16 elementwise op replaced by the op at
    float32 (module docstring), in its regions too; `graph` itself when there is none."""
    def replace(b, n, ins):
        if not _widens(n):
            return None
        op = n.inputs[0].node
        wide = [b.add(K.Cast, (b.value_of(v),), {"dtype": F32}) for v in op.inputs]
        return b.add(op.kind, wide, dict(op.attrs))
    new, count = rewrite(graph, replace, "widening bfloat16 results as XLA does")
    return dce(new).verify() if count else graph
