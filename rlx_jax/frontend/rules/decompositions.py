"""Linear algebra, FFTs and complex numbers: JAX's lax.linalg primitives become the kinds of
ops.LINALG with their params as attributes; `fft` becomes Fft with its type as a string;
`custom_linear_solve` (jnp.linalg.solve, inv, ...) is call-like: its `solve` jaxpr is
translated in place, which is what the primitive computes (its JVP and transpose are more
custom_linear_solve eqns, translated the same way).
"""
from ...ir.ops import OpKind as K
from . import jaxpr_rule

LINALG_PRIMITIVES = {
    "cholesky": K.Cholesky, "triangular_solve": K.TriangularSolve, "lu": K.Lu,
    "lu_pivots_to_permutation": K.LuPivotsToPermutation, "qr": K.Qr, "svd": K.Svd,
    "eigh": K.Eigh, "eig": K.Eig,
}
for _p, _k in LINALG_PRIMITIVES.items():   # one loop over a literal table
    jaxpr_rule(_p)(lambda ctx, *xs, _k=_k, **params: ctx.emit(_k, xs, **params))

jaxpr_rule("complex")(lambda ctx, x, y: ctx.emit(K.Complex, (x, y)))
jaxpr_rule("real")(lambda ctx, x: ctx.emit(K.Real, (x,)))
jaxpr_rule("imag")(lambda ctx, x: ctx.emit(K.Imag, (x,)))
jaxpr_rule("conj")(lambda ctx, x, *, input_dtype=None: ctx.emit(K.Conjugate, (x,)))


@jaxpr_rule("fft")
def _fft(ctx, x, *, fft_type, fft_lengths):
    return ctx.emit(K.Fft, (x,), fft_type=fft_type.name.lower(),
                    fft_lengths=tuple(int(n) for n in fft_lengths))


@jaxpr_rule("custom_linear_solve")
def _custom_linear_solve(ctx, *operands, const_lengths, jaxprs):
    """Operands: the consts of matvec, vecmat, solve, transpose_solve (in that order), then b."""
    start = const_lengths.matvec + const_lengths.vecmat
    consts = operands[start:start + const_lengths.solve]
    b = operands[sum(const_lengths):]
    return ctx.translate(jaxprs.solve, [*consts, *b])
