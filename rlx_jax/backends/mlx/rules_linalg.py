"""Linear algebra (ops.LINALG) on MLX: mx.linalg on the CPU stream (MLX has no GPU kernels for
them and refuses the default stream), with JAX's conventions, over any leading batch dims.

Inside `mx.compile` (measured, mlx 0.32.4, Linux CPU): cholesky, qr, svd (with and without
vectors), eigh, eig, eigvals, lu, lu_factor, solve_triangular and the mx.fft functions all
trace and run compiled, with the same values as eagerly, so graphs holding them are compiled
whole like any other; nothing is cut into segments for them. (With Metal, the default device
is the GPU and these ops still run on the CPU stream inside the compiled graph; MLX
synchronises the two streams itself.)

Conventions, checked against JAX on the CPU (LAPACK):
- Cholesky: the lower factor, upper triangle zero; a matrix that is not positive definite
  gives all NaN as JAX's potrf wrapper does (MLX leaves potrf's partial result: a failed
  pivot shows as a diagonal entry that is not > 0).
- Lu: mx.linalg.lu_factor's LU and 0-based getrf pivots equal JAX's; the permutation is the
  inverse (argsort) of mx.linalg.lu's row order (one more factorization, evaluated only when
  the permutation is used: MLX is lazy). LuPivotsToPermutation applies the pivots' row swaps
  one step at a time with gathers and scatters (elementwise ops here would be fused into
  kernels that take g++ minutes to build; measured 45 s for 64 swaps).
- TriangularSolve: only the `lower` triangle of `a` is read (the other may hold anything, as
  the packed LU JAX passes), unit_diagonal replaces the diagonal by ones, transpose_a /
  left_side=False are solved as the transposed systems; mx.linalg.solve_triangular.
- Qr: reduced from mx.linalg.qr; full_matrices for a tall matrix from the QR of [a | I]:
  the first n reflectors are a's own, so q's first n columns and r are a's factors and the
  other columns complete q to an orthogonal matrix (that completion is not unique).
- Svd / Eigh / Eig: mx.linalg.svd (full U and V; for full_matrices=False of a non-square
  real matrix whose long side is 11/6 of the short one or more, from the SVD of R in its QR
  as gesdd computes it then, so that the long side's full basis is never made; cut from the
  full one otherwise; s only for compute_uv=False), eigh (ascending, `lower` picks UPLO),
  eig / eigvals (right vectors). MLX hands its row-major operand to LAPACK unchanged, so
  LAPACK factorises the transpose; the rules pass the transpose (lapack_sees) so that gesdd
  and geev see the matrix jaxlib gives them, and the singular vectors' signs and the
  eigenvalues' order are gesdd's and geev's on it (to the rounding of MLX's LAPACK build).
  MLX's geev call computes left eigenvectors only: the right ones are (U^H)^-1 normalised as
  geev does, equal to JAX's except for the sign of a real matrix's complex-pair vectors.
Variants MLX has no kernel for (pivoted QR, left eigenvectors, subset_by_index, a chosen
`algorithm`, complex inputs where mx.linalg takes only real ones) are sent to the host by
`host_reason` (lower.host_reasons).
"""
import functools

import mlx.core as mx
import numpy as np

from ...ir import reference
from ...ir.ops import OpKind as K
from .runtime import mlx_to_np_dtype, to_mx_dtype
from .table import mlx_rule, out_dtype

CPU = mx.cpu
COMPLEX = mx.complex64
REAL_ONLY = {K.Cholesky: "mx.linalg.cholesky", K.TriangularSolve: "mx.linalg.solve_triangular",
             K.Lu: "mx.linalg.lu_factor", K.Qr: "mx.linalg.qr"}


THIN_COMPLEX_LIMIT = 4096     # long side of a complex thin SVD above which it goes to the host


def host_reason(node):
    """Why MLX cannot run this linear-algebra node natively (None: it can)."""
    a, k = node.attrs, node.kind
    if k in REAL_ONLY and any(v.dtype.kind == "c" for v in node.inputs):
        return f"{k.name} of {node.inputs[0].dtype.name}: {REAL_ONLY[k]} takes float32 only"
    if k in (K.Cholesky, K.TriangularSolve, K.Lu, K.Qr, K.Svd, K.Eigh, K.Eig) and any(
            v.dtype.kind == "f" and v.dtype.itemsize < 4 for v in node.inputs):
        return f"{k.name} of {node.inputs[0].dtype.name}: mx.linalg takes float32 only"
    if k is K.Qr and a.get("pivoting"):
        return "Qr with pivoting=True: MLX has no column-pivoted QR"
    if k in (K.Svd, K.Eigh) and a.get("subset_by_index") is not None:
        return f"{k.name} with subset_by_index={a['subset_by_index']}: MLX computes all of them"
    if k in (K.Svd, K.Eigh) and a.get("algorithm") is not None:
        return f"{k.name} with algorithm={a['algorithm']}: MLX has one algorithm"
    if (k is K.Svd and a.get("compute_uv") and not a.get("full_matrices")
            and node.inputs[0].dtype.kind == "c"
            and max(node.inputs[0].shape[-2:]) > THIN_COMPLEX_LIMIT):
        m, n = node.inputs[0].shape[-2:]
        return (f"thin Svd of a complex {m} x {n} matrix: mx.linalg.svd makes the long side's "
                f"full basis ({max(m, n)}^2 elements) and mx.linalg.qr, which avoids it for real "
                f"matrices, takes no complex ones")
    if k is K.Eig and a.get("compute_left_eigenvectors"):
        return "Eig with compute_left_eigenvectors=True: mx.linalg.eig gives right ones only"
    if k is K.Eig and a.get("implementation") is not None:
        return f"Eig with implementation={a['implementation']}: MLX has one implementation"
    return None


def sized(rule):
    """`rule`, except for a node with an empty operand (a (0, 0) matrix, a batch of none):
    MLX's LAPACK kernels divide by zero on those and kill the process (SIGFPE, measured with
    mlx 0.32.4 on Linux: inv of a (0, 0) matrix), so the node's results, which depend on the
    shapes alone then, are the reference semantics' on zeros (an empty factor, or an identity
    where a full basis of a non-empty side is asked for), as constants."""
    @functools.wraps(rule)
    def safe(ctx, node, *xs):
        if not any(0 in x.shape for x in xs):
            return rule(ctx, node, *xs)
        outs = reference.evaluate(node, *[np.zeros(x.shape, mlx_to_np_dtype(x.dtype))
                                          for x in xs])
        outs = outs if isinstance(outs, tuple) else (outs,)
        made = [mx.array(np.asarray(o), dtype=to_mx_dtype(v.dtype))
                for o, v in zip(outs, node.outputs)]
        return tuple(made) if len(made) > 1 else made[0]
    return safe


def _eye(n, like):
    return mx.broadcast_to(mx.eye(n, dtype=like.dtype), (*like.shape[:-2], n, n))


@mlx_rule(K.Cholesky)
@sized
def _cholesky(ctx, node, a):
    lo = mx.linalg.cholesky(a, stream=CPU)
    ok = mx.all(mx.diagonal(lo, axis1=-2, axis2=-1) > 0, axis=-1, keepdims=True)[..., None]
    return mx.where(ok, lo, mx.array(float("nan"), dtype=lo.dtype))


@mlx_rule(K.TriangularSolve)
@sized
def _triangular_solve(ctx, node, a, b):
    at = node.attrs
    lower = at["lower"]
    a = mx.tril(a) if lower else mx.triu(a)
    if at["unit_diagonal"]:
        n = a.shape[-1]
        eye = _eye(n, a)
        a = a * (1 - eye) + eye
    if at["transpose_a"]:
        a, lower = mx.swapaxes(a, -1, -2), not lower
    if at["left_side"]:                          # op(a) x = b
        return mx.linalg.solve_triangular(a, b, upper=not lower, stream=CPU)
    # x op(a) = b  <=>  op(a)^T x^T = b^T
    xt = mx.linalg.solve_triangular(mx.swapaxes(a, -1, -2), mx.swapaxes(b, -1, -2),
                                    upper=lower, stream=CPU)
    return mx.swapaxes(xt, -1, -2)


@mlx_rule(K.Lu)
@sized
def _lu(ctx, node, a):
    lu, pivots = mx.linalg.lu_factor(a, stream=CPU)
    rows = mx.linalg.lu(a, stream=CPU)[0]                 # a = rows-permuted L U
    perm = mx.argsort(rows, axis=-1)
    return lu, pivots.astype(out_dtype(node, 1)), perm.astype(out_dtype(node, 2))


def pivots_to_permutation(pivots, size):
    """The row order that getrf's swaps (row i <-> row pivots[i], in turn) make of range(size)."""
    pivots = pivots.astype(mx.int32)
    perm = mx.broadcast_to(mx.arange(size, dtype=mx.int32), (*pivots.shape[:-1], size))
    for i in range(pivots.shape[-1]):
        j = pivots[..., i:i + 1]
        pj = mx.take_along_axis(perm, j, axis=-1)
        perm = mx.put_along_axis(perm, j, perm[..., i:i + 1], axis=-1)
        perm = mx.concatenate([perm[..., :i], pj, perm[..., i + 1:]], axis=-1)
    return perm


@mlx_rule(K.LuPivotsToPermutation)
def _lu_pivots_to_permutation(ctx, node, pivots):
    return pivots_to_permutation(pivots, node.attrs["permutation_size"]).astype(out_dtype(node))


@mlx_rule(K.Qr)
@sized
def _qr(ctx, node, a):
    m, n = a.shape[-2:]
    if node.attrs["full_matrices"] and m > n:
        q, r = mx.linalg.qr(mx.concatenate([a, _eye(m, a)], axis=-1), stream=CPU)
        return q, r[..., :n]
    return tuple(mx.linalg.qr(a, stream=CPU))


def lapack_sees(x):
    """What to hand mx.linalg.svd / eig / eigvals so that LAPACK factorises `x` itself, as
    jaxlib does: MLX passes its row-major operand to the column-major routine unchanged, so
    LAPACK sees (and factorises) the transpose of what it is given."""
    return mx.swapaxes(x, -1, -2)


def gesdd(x):
    """gesdd's SVD of x, x = u diag(s) vt: MLX's kernel factorises x^T when given x, and
    x^T = vt^T s u^T, so its factors of lapack_sees(x) are read back transposed."""
    vt_t, s, u_t = mx.linalg.svd(lapack_sees(x), stream=CPU)
    return s, mx.swapaxes(u_t, -1, -2), mx.swapaxes(vt_t, -1, -2)


def qr_first(m, n):
    """Whether gesdd starts a thin real SVD with a QR (LQ) of the matrix: its long side at
    least 11/6 of the short one (sgesdd's MNTHR), where the SVD is that of R (L)."""
    return max(m, n) >= int(min(m, n) * 11 / 6)


@mlx_rule(K.Svd)
@sized
def _svd(ctx, node, a):
    if not node.attrs["compute_uv"]:
        return mx.linalg.svd(lapack_sees(a), compute_uv=False, stream=CPU)
    m, n = a.shape[-2:]
    thin = not node.attrs["full_matrices"]
    if thin and m != n and a.dtype != COMPLEX and qr_first(m, n):
        return _reduced_svd(a, m, n)              # mx.linalg.qr takes real matrices only
    s, u, vt = gesdd(a)
    if thin:
        k = min(m, n)
        u, vt = u[..., :k], vt[..., :k, :]
    return s, u, vt


def _reduced_svd(a, m, n):
    """The thin SVD of a non-square matrix as gesdd computes it when one side is long: the SVD
    of R in a = QR (of L in a = LQ), U = Q U_R (V^T = V_L^T Q). Without the full U (or V) of
    the long side, which mx.linalg.svd always makes (m x m: 640 GB for a 400,000 x 2 matrix, a
    SIGSEGV inside MLX). A wide a's L and Q are the transposes of a^T's R and Q."""
    if m >= n:
        q, r = mx.linalg.qr(a, stream=CPU)
        s, ur, vt = gesdd(r)
        return s, q @ ur, vt
    q, r = mx.linalg.qr(mx.swapaxes(a, -1, -2), stream=CPU)
    s, u, vlt = gesdd(mx.swapaxes(r, -1, -2))
    return s, u, vlt @ mx.swapaxes(q, -1, -2)


@mlx_rule(K.Eigh)
@sized
def _eigh(ctx, node, a):
    w, v = mx.linalg.eigh(a, UPLO="L" if node.attrs["lower"] else "U", stream=CPU)
    return v, w


@mlx_rule(K.Eig)
@sized
def _eig(ctx, node, a):
    """geev of a itself, as jaxlib calls it: the same Hessenberg-Schur reduction, so the
    eigenvalues come in its order. MLX's kernel asks geev for left eigenvectors only (of the
    matrix LAPACK sees), so the right ones are those of the same Schur form, V = (U^H)^-1
    (left and right eigenvectors of distinct eigenvalues are biorthogonal), with geev's
    normalisation."""
    if not node.attrs["compute_right_eigenvectors"]:
        return mx.linalg.eigvals(lapack_sees(a), stream=CPU)
    w, g = mx.linalg.eig(lapack_sees(a), stream=CPU)
    real = a.dtype != COMPLEX
    # g's columns: geev's left eigenvectors u (u^H a = w u^H), conjugated by MLX for a real a
    # and not for a complex one (so mx.linalg.eig of a complex matrix returns conj(V) itself).
    uh = mx.swapaxes(g, -1, -2) if real else mx.conj(mx.swapaxes(g, -1, -2))
    return w, geev_normalised(_inverse(uh), w, real)


def _inverse(x):
    """x^-1; a complex x through the real matrix [[re, -im], [im, re]] (mx.linalg.inv takes
    real matrices only), whose inverse holds x^-1's parts the same way."""
    if x.dtype != COMPLEX:
        return mx.linalg.inv(x, stream=CPU)
    n = x.shape[-1]
    re, im = mx.real(x), mx.imag(x)
    big = mx.concatenate([mx.concatenate([re, -im], axis=-1),
                          mx.concatenate([im, re], axis=-1)], axis=-2)
    inv = mx.linalg.inv(big, stream=CPU)
    return inv[..., :n, :n] + 1j * inv[..., n:, :n]


def geev_normalised(v, w, real):
    """geev's normalisation of eigenvectors (the columns of v), which JAX documents: unit
    2-norm, the largest-magnitude component real (the first of ties, as i?amax picks). cgeev
    makes it positive, and so V is determined; sgeev leaves a real eigenvalue's (real) vector
    as it is, whose sign (U^H)^-1 then has already, and for a complex pair rotates its own
    vector's largest component onto the real axis keeping that component's sign (+ here: V
    gives no way to know it)."""
    v = v / mx.sqrt(mx.sum(mx.square(mx.abs(v)), axis=-2, keepdims=True))
    big = mx.take_along_axis(v, mx.argmax(mx.abs(v), axis=-2, keepdims=True), axis=-2)
    phase = mx.conj(big) / mx.abs(big)
    if real:
        phase = mx.where(mx.imag(w)[..., None, :] == 0, mx.array(1, COMPLEX), phase)
    return v * phase


# ---- FFTs and complex parts (ops.SPECTRAL) ----
FFTS = {"rfft": mx.fft.rfftn, "irfft": mx.fft.irfftn}


STEPS = {"fft": mx.fft.fft, "ifft": mx.fft.ifft}


@mlx_rule(K.Fft)
def _fft(ctx, node, x):
    """Over the last len(fft_lengths) axes with those lengths (irfft: its output's). A complex
    transform over several axes is taken one axis at a time from the last to the first, the
    order XLA's CPU FFT (ducc) takes them: MLX's 1-D FFT equals it bit for bit, and its own
    fftn, taking the first axis first, rounds otherwise (1e-4 apart on a 128 x 128 fft2).
    MLX's rfftn and irfftn take XLA's order already."""
    lengths, kind = list(node.attrs["fft_lengths"]), node.attrs["fft_type"]
    axes = list(range(-len(lengths), 0))
    if kind in STEPS:
        for axis, n in reversed(list(zip(axes, lengths))):
            x = STEPS[kind](x, n=n, axis=axis)
        return x.astype(out_dtype(node))
    return FFTS[kind](x, s=lengths, axes=axes).astype(out_dtype(node))


@mlx_rule(K.Complex)
def _complex(ctx, node, x, y):
    """x + i y built from the two float32 parts' bits (x + 1j * y would turn an infinite y
    into a NaN real part)."""
    x, y = mx.broadcast_arrays(x.astype(mx.float32), y.astype(mx.float32))
    return mx.stack([x, y], axis=-1).view(COMPLEX).squeeze(-1)


mlx_rule(K.Real)(lambda ctx, node, x: mx.real(x) if x.dtype == COMPLEX else x)
mlx_rule(K.Imag)(lambda ctx, node, x: mx.imag(x) if x.dtype == COMPLEX else mx.zeros_like(x))
mlx_rule(K.Conjugate)(lambda ctx, node, x: mx.conj(x.astype(COMPLEX)))
