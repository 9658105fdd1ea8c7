"""Which ops MLX runs on complex64 values (measured against JAX on the CPU, mlx 0.32.4).

MLX holds complex64 arrays and computes these with JAX's results (relative error <= ~3e-7 on
values of magnitude 1e-3..1e2, pow <= ~1e-5 as exp(y log x) amplifies; eq / ne / max / min
exact, max and min in JAX's lexicographic order): add, sub, mul, div, pow, max, min, neg,
abs (float32 result), sign, exp, log, log1p, sqrt, rsqrt, square, sin, cos, tan, tanh, cosh,
asin, acos, atan, asinh, acosh, atanh, integer_pow, eq, ne, sums and products, contractions,
casts from and to complex (to a real type: the real part, as JAX), and everything that only
moves data. The rest are run on the host with a reason naming the op and the dtype
(`host_reason`): MLX refuses expm1 and sigmoid on complex64, its sinh loses the real part
of small arguments (relative error 5e-4 at |z| ~ 1e-4), and orders, windows, sorting and
scans on complex values were not checked.
"""
from ...ir.ops import OpKind as K

# kinds whose every variant moves or selects complex values without arithmetic
ANY = frozenset({
    K.Input, K.Constant, K.Reshape, K.Transpose, K.Narrow, K.Slice, K.Concat, K.Expand, K.Reverse,
    K.Pad, K.Gather, K.DynamicSlice, K.DynamicUpdateSlice, K.Where, K.Cast, K.MatMul,
    K.DotGeneral, K.Complex, K.Real, K.Imag, K.Conjugate, K.Fft, K.Svd, K.Eigh, K.Eig,
})
BY_FN = {
    K.Binary: frozenset({"add", "sub", "mul", "div", "pow", "max", "min"}),
    K.Compare: frozenset({"eq", "ne"}),
    K.Reduce: frozenset({"sum", "prod"}),
    K.Activation: frozenset({
        "neg", "abs", "sign", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sin", "cos",
        "tan", "tanh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
        "integer_pow"}),
}


def host_reason(node):
    """Why MLX does not run `node` on its complex64 operands or results (None: it does)."""
    values = [*node.inputs, *node.outputs]
    if not any(v.dtype.kind == "c" for v in values) or node.kind in ANY:
        return None
    fns = BY_FN.get(node.kind)
    fn = node.attrs.get("fn")
    if fns is not None and fn in fns:
        return None
    what = f"{node.kind.name}[fn={fn}]" if fn is not None else node.kind.name
    return f"{what} on complex64 is not run by backend 'mlx' (not supported or not exact there)"
