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
  real matrix the SVD of R in its QR, so that the long side's full basis is never made, cut
  from the full one for a complex matrix, which mx.linalg.qr does not take; s only for
  compute_uv=False), eigh (ascending, `lower` picks UPLO), eig / eigvals (right vectors).
  Singular and eigen vectors are unique only up to sign (phase), so they are checked as JAX's
  own tests check them: reconstruction, orthogonality, sorted eigenvalues.
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


@mlx_rule(K.Svd)
@sized
def _svd(ctx, node, a):
    if not node.attrs["compute_uv"]:
        return mx.linalg.svd(a, compute_uv=False, stream=CPU)
    m, n = a.shape[-2:]
    thin = not node.attrs["full_matrices"]
    if thin and m != n and a.dtype != COMPLEX:       # mx.linalg.qr takes real matrices only
        return _reduced_svd(a, m, n)
    u, s, vt = mx.linalg.svd(a, stream=CPU)
    if thin:
        k = min(m, n)
        u, vt = u[..., :k], vt[..., :k, :]
    return s, u, vt


def _reduced_svd(a, m, n):
    """The thin SVD of a non-square matrix without the full U (or V) of its long side, which
    mx.linalg.svd always makes (m x m: 640 GB for a 400,000 x 2 matrix, a SIGSEGV inside MLX):
    a tall a = QR, R = U' S V^T, so U = Q U'; a wide one is its transpose's."""
    if m < n:
        s, u, vt = _reduced_svd(mx.swapaxes(a, -1, -2), n, m)
        return s, mx.swapaxes(vt, -1, -2), mx.swapaxes(u, -1, -2)
    q, r = mx.linalg.qr(a, stream=CPU)
    ur, s, vt = mx.linalg.svd(r, stream=CPU)
    return s, q @ ur, vt


@mlx_rule(K.Eigh)
@sized
def _eigh(ctx, node, a):
    w, v = mx.linalg.eigh(a, UPLO="L" if node.attrs["lower"] else "U", stream=CPU)
    return v, w


@mlx_rule(K.Eig)
@sized
def _eig(ctx, node, a):
    if not node.attrs["compute_right_eigenvectors"]:
        return mx.linalg.eigvals(a, stream=CPU)
    w, v = mx.linalg.eig(a, stream=CPU)
    return w, v


# ---- FFTs and complex parts (ops.SPECTRAL) ----
FFTS = {"fft": mx.fft.fftn, "ifft": mx.fft.ifftn, "rfft": mx.fft.rfftn, "irfft": mx.fft.irfftn}


@mlx_rule(K.Fft)
def _fft(ctx, node, x):
    """Over the last len(fft_lengths) axes with those lengths (irfft: its output's)."""
    lengths = list(node.attrs["fft_lengths"])
    axes = list(range(-len(lengths), 0))
    return FFTS[node.attrs["fft_type"]](x, s=lengths, axes=axes).astype(out_dtype(node))


@mlx_rule(K.Complex)
def _complex(ctx, node, x, y):
    """x + i y built from the two float32 parts' bits (x + 1j * y would turn an infinite y
    into a NaN real part)."""
    x, y = mx.broadcast_arrays(x.astype(mx.float32), y.astype(mx.float32))
    return mx.stack([x, y], axis=-1).view(COMPLEX).squeeze(-1)


mlx_rule(K.Real)(lambda ctx, node, x: mx.real(x) if x.dtype == COMPLEX else x)
mlx_rule(K.Imag)(lambda ctx, node, x: mx.imag(x) if x.dtype == COMPLEX else mx.zeros_like(x))
mlx_rule(K.Conjugate)(lambda ctx, node, x: mx.conj(x.astype(COMPLEX)))
