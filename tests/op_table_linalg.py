"""Op-table cases: linear algebra (cholesky, triangular_solve, lu, qr, svd, eigh, eig,
custom_linear_solve and what jnp.linalg / jax.scipy.linalg build from them), FFTs and complex
numbers.

Eigenvectors and singular vectors are unique only up to a sign (a phase for complex ones), so,
as JAX's own linalg tests do, those cases compare what is unique: eigenvalues, singular values,
reconstructions (q @ r, u diag(s) vt, v diag(w) vt), orthogonality and absolute values; LU's
pivots and permutations are compared exactly. Tolerances: float32 at 1e-4 (JAX's linalg tests
use 1e-3 to 1e-4 for float32 decompositions of small, well-conditioned matrices); gradients
at 10 times that (test_ops.py).
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .op_table_base import Case, args, f32

TOL = 1e-4


def spd(*shape):
    """Symmetric positive definite matrices of shape (..., n, n), well conditioned."""
    def make(r):
        a = r.uniform(-1, 1, shape).astype(np.float32)
        return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(np.float32)
    return make


def tri(*shape, lower=True):
    """Triangular matrices with a dominant diagonal (well conditioned solves)."""
    def make(r):
        a = r.uniform(-1, 1, shape).astype(np.float32) + 3 * np.eye(shape[-1], dtype=np.float32)
        return (np.tril(a) if lower else np.triu(a)).astype(np.float32)
    return make


def cplx(*shape, lo=-2.0, hi=2.0):
    """complex64 arrays, real and imaginary parts uniform in [lo, hi]."""
    return lambda r: (r.uniform(lo, hi, shape) + 1j * r.uniform(lo, hi, shape)).astype(
        np.complex64)


def case(name, fn, makers, grad=False, tol=TOL):
    return Case(name, fn, args(*makers), grad=grad, atol=tol, rtol=tol)


def _trsm(left, lower, trans, unit):
    def fn(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans,
                                           unit_diagonal=unit)
    return fn


def _qr(full):
    def fn(a):
        q, r = jnp.linalg.qr(a, mode="complete" if full else "reduced")
        return q @ r, jnp.abs(r), jnp.swapaxes(q, -1, -2) @ q
    return fn


def _svd(full):
    def fn(a):
        u, s, vt = jnp.linalg.svd(a, full_matrices=full)
        k = s.shape[-1]
        return s, (u[..., :k] * s[..., None, :]) @ vt[..., :k, :], jnp.swapaxes(u, -1, -2) @ u
    return fn


def _eigh(lower):
    def fn(a):
        w, v = jnp.linalg.eigh(a, UPLO="L" if lower else "U", symmetrize_input=False)
        return w, (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2), jnp.abs(v)
    return fn


def _eig(a):
    w = jnp.linalg.eigvals(a)
    return jnp.sort(jnp.real(w)), jnp.sort(jnp.imag(w))


def _cho_solve(a, b):
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(a), True), b)


def _gp_nll(k, y):
    chol = jnp.linalg.cholesky(k + 1e-3 * jnp.eye(k.shape[0]))
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.log(jnp.diag(chol)).sum()


def _lu(a):
    lu, piv, perm = lax.linalg.lu(a)
    return lu, piv, perm


LINALG_CASES = [
    case("cholesky_f32", jnp.linalg.cholesky, [spd(4, 4)], grad=True),
    case("cholesky_batched_f32", jnp.linalg.cholesky, [spd(2, 3, 3)], grad=True),
    *[case(f"triangular_solve_{'l' if left else 'r'}{'lo' if lower else 'up'}"
           f"{'_t' if trans else ''}{'_unit' if unit else ''}_f32",
           _trsm(left, lower, trans, unit),
           [tri(4, 4, lower=lower), f32(4, 3) if left else f32(3, 4)], grad=True)
      for left, lower, trans, unit in [(True, True, False, False), (True, False, True, False),
                                       (False, True, False, True), (False, False, True, False)]],
    case("triangular_solve_batched_f32", _trsm(True, True, False, False),
         [tri(2, 3, 3), f32(2, 3, 2)], grad=True),
    case("solve_triangular_f32", lambda a, b: jax.scipy.linalg.solve_triangular(
        a, b, lower=False, trans=1), [tri(4, 4, lower=False), f32(4)], grad=True),
    case("cho_solve_f32", _cho_solve, [spd(4, 4), f32(4, 2)], grad=True),
    case("gp_nll_f32", _gp_nll, [spd(5, 5), f32(5)], grad=True),
    case("lu_f32", _lu, [f32(4, 4)], grad=True),
    case("lu_batched_f32", _lu, [f32(2, 3, 3)]),
    case("lu_factor_f32", jax.scipy.linalg.lu_factor, [f32(5, 5)]),
    case("lu_pivots_to_permutation_i32",
         lambda p: lax.linalg.lu_pivots_to_permutation(p, 5),
         [lambda r: np.array([[2, 3, 2], [0, 4, 4]], np.int32)]),
    case("qr_reduced_f32", _qr(False), [f32(5, 3)], grad=True),
    case("qr_complete_f32", _qr(True), [f32(5, 3)]),
    case("qr_batched_f32", _qr(False), [f32(2, 4, 4)]),
    case("svd_f32", _svd(True), [f32(4, 3)], grad=False),
    case("svd_reduced_f32", _svd(False), [f32(3, 5)]),
    case("svd_values_f32", lambda a: jnp.linalg.svd(a, compute_uv=False), [f32(2, 4, 3)],
         grad=True),
    case("eigh_lower_f32", _eigh(True), [spd(4, 4)]),
    case("eigh_upper_f32", _eigh(False), [spd(2, 3, 3)]),
    case("eigh_values_f32", jnp.linalg.eigvalsh, [spd(4, 4)], grad=True),
    case("eig_values_f32", _eig, [f32(4, 4)]),
    case("solve_f32", jnp.linalg.solve, [spd(4, 4), f32(4, 2)], grad=True),
    case("solve_batched_f32", jnp.linalg.solve, [f32(2, 3, 3), f32(2, 3, 1)]),
    case("inv_f32", jnp.linalg.inv, [spd(3, 3)], grad=True),
    case("det_f32", jnp.linalg.det, [f32(3, 3)], grad=True),
    case("slogdet_f32", lambda a: jnp.linalg.slogdet(a), [f32(2, 4, 4)], grad=True),
    case("pinv_f32", jnp.linalg.pinv, [f32(4, 3)]),
    case("lstsq_f32", lambda a, b: jnp.linalg.lstsq(a, b)[0], [f32(5, 3), f32(5, 2)]),
    case("matrix_power_f32", lambda a: jnp.linalg.matrix_power(a, 3), [f32(3, 3, lo=-1, hi=1)],
         grad=True),
    case("expm_f32", jax.scipy.linalg.expm, [f32(3, 3, lo=-0.5, hi=0.5)]),
]


def _power(x):
    return jnp.abs(jnp.fft.rfft(x)) ** 2


def _spectral(x, w):
    """An FNO-style spectral layer: keep 4 modes, multiply them by complex weights."""
    modes = jnp.fft.rfft(x, axis=-1)[..., :4] * (w[0] + 1j * w[1])
    return jnp.fft.irfft(modes, n=x.shape[-1], axis=-1)


FFT_CASES = [
    case("fft_c64", jnp.fft.fft, [cplx(3, 8)]),
    case("ifft_c64", jnp.fft.ifft, [cplx(7)]),
    case("fft2_c64", jnp.fft.fft2, [cplx(2, 4, 6)]),
    case("fftn_3axes_c64", jnp.fft.fftn, [cplx(3, 4, 5)]),
    case("rfft_f32", jnp.fft.rfft, [f32(2, 16)]),
    case("rfft_odd_f32", jnp.fft.rfft, [f32(9)]),
    case("irfft_c64", lambda x: jnp.fft.irfft(x, n=10), [cplx(2, 6)]),
    case("rfft2_f32", jnp.fft.rfft2, [f32(4, 6)]),
    case("irfftn_c64", lambda x: jnp.fft.irfftn(x, s=(4, 6)), [cplx(4, 4)]),
    case("power_spectrum_f32", _power, [f32(3, 32)], grad=True),
    case("spectral_layer_f32", _spectral, [f32(2, 16), f32(2, 4)], grad=True),
]

COMPLEX_CASES = [
    case("complex_parts_f32", lambda x, y: (lambda z: (jnp.real(z), jnp.imag(z)))(
        lax.complex(x, y) * (1 - 2j)), [f32(3, 4), f32(3, 4)], grad=True),
    case("complex_arith_c64", lambda z, w: (z + w, z - w, z * w, z / w, -z, jnp.conj(z)),
         [cplx(5), cplx(5, lo=1, hi=2)]),
    case("complex_abs_c64", jnp.abs, [cplx(2, 5)]),
    case("complex_exp_c64", jnp.exp, [cplx(6, lo=-1, hi=1)]),
    case("complex_matmul_c64", jnp.matmul, [cplx(3, 4), cplx(4, 2)]),
    case("complex_sum_c64", lambda z: jnp.sum(z, axis=1), [cplx(3, 4)]),
    case("complex_reshape_c64", lambda z: jnp.transpose(z.reshape(2, 6))[1:4], [cplx(3, 4)]),
    case("real_to_complex_f32", lambda x: jnp.angle(x.astype(jnp.complex64) * 1j + 1.0),
         [f32(5)]),
]

CASES = LINALG_CASES + FFT_CASES + COMPLEX_CASES
