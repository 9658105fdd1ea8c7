"""The reference semantics of the linear-algebra, FFT and complex-number kinds (ops.LINALG,
ops.SPECTRAL): JAX's own primitives, bound with the node's attributes, which are the
primitive's params (ir/reference.py registers them in REFERENCE).

Given / Result (`jnp.linalg.svd(a)`):
    %1:f32[3], %2:f32[3,3], %3:f32[3,3] = Svd[full_matrices=True, compute_uv=True, ...] %0
    -> svd_p.bind(a, full_matrices=True, compute_uv=True, ...): (s, u, vt), the primitive's order
"""
from jax import lax
from ..jax_internals import module
from .ops import OpKind as K

_linalg = module("linalg")

# fft_type attribute (a string, so every backend reads it without JAX) -> lax.FftType
FFT_TYPES = {"fft": lax.FftType.FFT, "ifft": lax.FftType.IFFT, "rfft": lax.FftType.RFFT,
             "irfft": lax.FftType.IRFFT}


def _bound(primitive):
    def ref(*operands, **attrs):
        out = primitive.bind(*operands, **attrs)
        return tuple(out) if primitive.multiple_results else out
    ref.__name__ = primitive.name
    return ref


LINALG_REFERENCE = {
    K.Cholesky: _bound(_linalg.cholesky_p),
    K.TriangularSolve: _bound(_linalg.triangular_solve_p),
    K.Lu: _bound(_linalg.lu_p),
    K.LuPivotsToPermutation: _bound(_linalg.lu_pivots_to_permutation_p),
    K.Qr: _bound(_linalg.qr_p),
    K.Svd: _bound(_linalg.svd_p),
    K.Eigh: _bound(_linalg.eigh_p),
    K.Eig: _bound(_linalg.eig_p),
    K.Fft: lambda x, *, fft_type, fft_lengths: lax.fft(x, FFT_TYPES[fft_type], fft_lengths),
    K.Complex: lax.complex,
    K.Real: lax.real,
    K.Imag: lax.imag,
    K.Conjugate: lax.conj,
}
