"""Linear algebra, FFTs and complex64 on backend 'mlx' (rules_linalg.py, complex_values.py):
values against JAX on the CPU (jax.jit), every attribute variant, batched and unbatched,
gradients against jax.grad, and where each op runs (exactly: nothing on the host for the
native cases; the expected reason for the variants MLX has no kernel for).

Tolerance (float32): JAX's own linalg tests compare float32 results to ~1e-5 relative to the
matrix; here |result - expected| <= 1e-5 * max(1, |matrix|_F) (TOL). Singular and eigen
vectors are unique only up to sign / phase, so, as JAX's tests do, they are checked through
reconstruction and orthogonality, and the values (sorted) directly.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax

pytest.importorskip("mlx.core")
mx = pytest.importorskip("mlx.core")

TOL = 1e-5
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def spd(*shape):
    a = rand(*shape)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(np.float32)


def native(f, *args):
    """f on MLX, asserting every op is placed on the device; the numpy results."""
    jitted = rlx_jax.jit(f, backend="mlx", output="numpy")
    assert jitted.lower(*args).placement().host_ops() == []
    return jitted(*args)


def host_reasons(f, *args):
    return [(n.kind.name, why) for n, why in
            rlx_jax.jit(f, backend="mlx").lower(*args).placement().host_ops()]


def close(got, want, scale=1.0):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL * max(1.0, scale))


def fro(a):
    return float(np.max(np.linalg.norm(np.asarray(a), axis=(-2, -1))))


def mT(x):
    return np.conj(np.swapaxes(x, -1, -2))


def orthonormal_columns(q):
    k = q.shape[-1]
    close(mT(q) @ q, np.broadcast_to(np.eye(k, dtype=q.dtype), q.shape[:-2] + (k, k)))


SHAPES = [(5, 5), (2, 3, 4, 4)]


@pytest.mark.parametrize("shape", SHAPES)
def test_cholesky(shape):
    a = spd(*shape)
    close(native(jnp.linalg.cholesky, a), jax.jit(jnp.linalg.cholesky)(a), fro(a))


def test_cholesky_not_positive_definite_is_nan_as_jax():
    a = np.stack([spd(3, 3), np.array([[1, 2, 0], [2, 1, 0], [0, 0, 1]], np.float32)])
    got, want = native(jnp.linalg.cholesky, a), np.asarray(jax.jit(jnp.linalg.cholesky)(a))
    assert np.isnan(want[1]).any() and not np.isnan(want[0]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    close(got[0], want[0], fro(a[0]))


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_triangular_solve(left_side, lower, transpose_a, unit_diagonal, batch):
    """The other triangle of `a` holds large values, which must not be read."""
    n = 4
    a = 0.3 * rand(*batch, n, n) + 3 * np.eye(n, dtype=np.float32)
    a = a + 100 * (np.triu(np.ones((n, n)), 1) if lower else np.tril(np.ones((n, n)), -1))
    b = rand(*batch, n, 3) if left_side else rand(*batch, 3, n)

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                           transpose_a=transpose_a, conjugate_a=transpose_a,
                                           unit_diagonal=unit_diagonal)
    close(native(f, a.astype(np.float32), b), jax.jit(f)(a.astype(np.float32), b), 10)


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5, 5), (6, 3), (2, 3, 6)])
def test_lu_pivots_and_permutation_equal_jax(shape):
    a = rand(*shape)
    lu, piv, perm = native(lax.linalg.lu, a)
    want = jax.jit(lax.linalg.lu)(a)
    np.testing.assert_array_equal(piv, want[1])
    np.testing.assert_array_equal(perm, want[2])
    assert piv.dtype == perm.dtype == np.int32
    close(lu, want[0], fro(a))


def test_lu_singular_matrix_as_jax():
    a = np.array([[1, 2], [2, 4]], np.float32)
    got, want = native(lax.linalg.lu, a), jax.jit(lax.linalg.lu)(a)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-6)


@pytest.mark.parametrize("size", [4, 7])
def test_lu_pivots_to_permutation(size):
    piv = np.asarray(jax.jit(lax.linalg.lu)(rand(3, 4, 4))[1])

    def f(p):
        return lax.linalg.lu_pivots_to_permutation(p, size)
    np.testing.assert_array_equal(native(f, piv), jax.jit(f)(piv))


def test_solve_det_inv_through_lu():
    a, b = rand(2, 4, 4) + 2 * np.eye(4, dtype=np.float32), rand(2, 4, 3)
    for f, args in [(jnp.linalg.solve, (a, b)), (jnp.linalg.det, (a,)), (jnp.linalg.inv, (a,)),
                    (lambda a: jnp.linalg.slogdet(a)[1], (a,))]:
        close(native(f, *args), jax.jit(f)(*args), fro(a) ** 2)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 3)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_qr(shape, full_matrices):
    a = rand(*shape)

    def f(a):
        return lax.linalg.qr(a, full_matrices=full_matrices)
    q, r = native(f, a)
    jq, jr = jax.jit(f)(a)
    assert q.shape == jq.shape and r.shape == jr.shape
    close(q @ r, a, fro(a))
    orthonormal_columns(q)
    np.testing.assert_array_equal(r, np.triu(r))
    close(np.abs(np.diagonal(r, axis1=-2, axis2=-1)),
          np.abs(np.diagonal(np.asarray(jr), axis1=-2, axis2=-1)), fro(a))


def check_svd(a, full_matrices):
    def f(a):
        return jnp.linalg.svd(a, full_matrices=full_matrices)
    u, s, vt = native(f, a)
    ju, js, jvt = jax.jit(f)(a)
    assert u.shape == ju.shape and vt.shape == jvt.shape
    close(s, js, fro(a))
    k = s.shape[-1]
    close((u[..., :k] * s[..., None, :].astype(u.dtype)) @ vt[..., :k, :], a, fro(a))
    orthonormal_columns(u)
    orthonormal_columns(mT(vt))


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (2, 3, 5)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd(shape, full_matrices):
    check_svd(rand(*shape), full_matrices)


def test_svd_complex_and_values_only():
    check_svd(rand(2, 4, 3, dtype=np.complex64), False)
    a = rand(2, 5, 3)
    close(native(jnp.linalg.svdvals, a), jax.jit(jnp.linalg.svdvals)(a), fro(a))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("batch", [(), (2, 2)])
def test_eigh_reads_one_triangle(lower, dtype, batch):
    a = rand(*batch, 5, 5, dtype=dtype)

    def f(a):
        return lax.linalg.eigh(a, lower=lower, symmetrize_input=False)
    v, w = native(f, a)
    jv, jw = jax.jit(f)(a)
    tri = np.tril(a) if lower else np.triu(a)
    h = tri + mT(tri) - np.eye(5) * np.real(np.diagonal(a, axis1=-2, axis2=-1))[..., None]
    close(w, jw, fro(a))
    assert (np.diff(w, axis=-1) >= 0).all()
    close(h.astype(dtype) @ v, v * w[..., None, :].astype(dtype), fro(a))
    orthonormal_columns(v)


def test_eig_right_vectors_and_values():
    a = rand(2, 4, 4)
    w, v = native(jnp.linalg.eig, a)
    jw = np.asarray(jax.jit(jnp.linalg.eigvals)(a))
    close(np.sort_complex(w.reshape(-1)), np.sort_complex(jw.reshape(-1)), fro(a))
    close(a.astype(np.complex64) @ v, v * w[..., None, :], fro(a))
    close(np.linalg.norm(v, axis=-2), np.ones((2, 4), np.float32))
    close(np.sort_complex(native(jnp.linalg.eigvals, a).reshape(-1)),
          np.sort_complex(jw.reshape(-1)), fro(a))


@pytest.mark.parametrize("f, args, kind, reason", [
    (lambda a: lax.linalg.qr(a, pivoting=True), (rand(4, 3),), "Qr", "pivoting=True"),
    (lambda a: lax.linalg.svd(a, algorithm=lax.linalg.SvdAlgorithm.QR), (rand(4, 3),), "Svd",
     "algorithm="),
    (lambda a: lax.linalg.eig(a, compute_left_eigenvectors=True), (rand(3, 3),), "Eig",
     "compute_left_eigenvectors=True"),
    (lambda a: lax.linalg.cholesky(a), (spd(3, 3).astype(np.complex64),), "Cholesky",
     "complex64: mx.linalg.cholesky takes float32 only"),
    (lambda a: lax.linalg.lu(a), (rand(3, 3, dtype=np.complex64),), "Lu",
     "complex64: mx.linalg.lu_factor takes float32 only"),
])
@pytest.mark.host("linear-algebra variants MLX has no kernel for run on the host (under test)")
def test_variants_without_mlx_kernel_run_on_the_host(f, args, kind, reason):
    """(subset_by_index is sent to the host as well, where JAX's CPU refuses it.)"""
    ops = host_reasons(f, *args)
    assert [k for k, _ in ops] == [kind] and reason in ops[0][1], ops
    got = rlx_jax.jit(f, backend="mlx", output="numpy")(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(jax.jit(f)(*args))):
        np.testing.assert_allclose(g, w, atol=1e-5 * max(1, fro(args[0])))


def test_subset_by_index_is_placed_on_the_host():
    """JAX's CPU refuses subset_by_index itself, so only the placement is checked."""
    ops = host_reasons(lambda a: lax.linalg.eigh(a, subset_by_index=(0, 2)), spd(4, 4))
    assert ops == [("Eigh", "Eigh with subset_by_index=(0, 2): MLX computes all of them")]
    ops = host_reasons(lambda a: lax.linalg.svd(a, full_matrices=False,
                                                subset_by_index=(0, 2)), rand(4, 3))
    assert ops == [("Svd", "Svd with subset_by_index=(0, 2): MLX computes all of them")]


FFTS = [("fft", jnp.fft.fftn, np.complex64, None), ("ifft", jnp.fft.ifftn, np.complex64, None),
        ("rfft", jnp.fft.rfftn, np.float32, None), ("irfft", jnp.fft.irfftn, np.complex64, 7)]


@pytest.mark.parametrize("name, fn, dtype, last", FFTS)
@pytest.mark.parametrize("naxes", [1, 2, 3])
def test_fft(name, fn, dtype, last, naxes):
    x = rand(2, 3, 4, 6, dtype=dtype)
    axes = tuple(range(-naxes, 0))
    s = None if last is None else (*x.shape[-naxes:-1], last)

    def f(x):
        return fn(x, s=s, axes=axes)
    ops = rlx_jax.jit(f, backend="mlx").lower(x).graph.op_counts()
    assert ops.get("Fft") == 1
    close(native(f, x), jax.jit(f)(x), np.sqrt(x.size))


def test_fft_lengths_pad_and_crop():
    x = rand(3, 8)
    for f in (lambda x: jnp.fft.rfft(x, n=5), lambda x: jnp.fft.irfft(jnp.fft.rfft(x), n=11),
              lambda x: jnp.fft.fft(x, n=12)):
        close(native(f, x), jax.jit(f)(x), 10)


def test_complex_parts_and_infinities():
    x = np.array([1.5, np.inf, -0.0, 2.0], np.float32)
    y = np.array([np.inf, 3.0, 1.0, -np.inf], np.float32)
    got = native(lambda x, y: lax.complex(x, y), x, y)
    np.testing.assert_array_equal(got, jax.jit(lax.complex)(x, y))
    z = rand(3, 4, dtype=np.complex64)
    for f in (jnp.real, jnp.imag, jnp.conj, lambda z: jnp.conj(jnp.real(z))):
        np.testing.assert_array_equal(native(f, z), jax.jit(f)(z))


EMPTY = {"inv": jnp.linalg.inv, "pinv": jnp.linalg.pinv, "det": jnp.linalg.det,
         "cholesky": jnp.linalg.cholesky, "qr": lambda a: jnp.linalg.qr(a, mode="complete"),
         "svd": jnp.linalg.svd, "eigh": jnp.linalg.eigh, "eigvals": jnp.linalg.eigvals,
         "solve": lambda a: jnp.linalg.solve(a, a)}


@pytest.mark.parametrize("name, shape", [
    (n, s) for n in sorted(EMPTY) for s in [(0, 0), (2, 0, 0), (0, 3), (3, 0)]
    if n in ("pinv", "qr", "svd") or s[-1] == s[-2]])        # the others take square ones
def test_empty_matrices_as_jax(name, shape):
    """Empty operands (JAX's testInv with shape (0, 0)): MLX's LAPACK kernels divide by zero
    on them and kill the process, so rlx_jax gives their shape-determined results itself
    (an identity where a full basis of a non-empty side is asked for)."""
    a = np.zeros(shape, np.float32)
    got, want = rlx_jax.jit(EMPTY[name], backend="mlx")(a), jax.jit(EMPTY[name])(a)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("shape", [(3000, 2), (2, 3000), (2, 70, 7), (3, 7, 70)])
def test_thin_svd_never_makes_the_long_sides_basis(shape):
    """svd(full_matrices=False) and pinv of a non-square matrix (JAX's testPinv with a
    400,000 x 2 matrix, whose full U is 640 GB: a SIGSEGV inside mx.linalg.svd) are computed
    from the SVD of R in the matrix's QR; equal to JAX's at float32 tolerances."""
    a = np.random.RandomState(1).rand(*shape).astype(np.float32)
    f = lambda x: jnp.linalg.svd(x, full_matrices=False)      # noqa: E731
    u, s, vt = rlx_jax.jit(f, backend="mlx")(a)
    uw, sw, vw = jax.jit(f)(a)
    assert (u.shape, s.shape, vt.shape) == (uw.shape, sw.shape, vw.shape)
    np.testing.assert_allclose(s, sw, rtol=2e-5)
    np.testing.assert_allclose((u * s[..., None, :]) @ vt, a, atol=5e-4)
    eye = np.broadcast_to(np.eye(s.shape[-1], dtype=np.float32), (*shape[:-2], *[s.shape[-1]] * 2))
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, eye, atol=1e-4)
    np.testing.assert_allclose(vt @ np.swapaxes(vt, -1, -2), eye, atol=1e-4)
    np.testing.assert_allclose(rlx_jax.jit(jnp.linalg.pinv, backend="mlx")(a),
                               jax.jit(jnp.linalg.pinv)(a), rtol=1e-4, atol=1e-5)


@pytest.mark.host("a complex thin SVD with a long side above THIN_COMPLEX_LIMIT runs on the host",
                  backends=("mlx",))
def test_long_complex_thin_svd_runs_on_the_host():
    """mx.linalg.qr takes no complex matrices, so a complex thin SVD would make the long side's
    full basis (JAX's testPinv6: 400,000 x 2 complex64); above THIN_COMPLEX_LIMIT it is placed
    on the host, with that reason, and equals JAX's."""
    from rlx_jax.backends.mlx.rules_linalg import THIN_COMPLEX_LIMIT
    r = np.random.RandomState(2)
    a = (r.rand(THIN_COMPLEX_LIMIT + 1, 2) + 1j * r.rand(THIN_COMPLEX_LIMIT + 1, 2))
    a = a.astype(np.complex64)
    f = rlx_jax.jit(jnp.linalg.pinv, backend="mlx")
    ((node, why),) = f.lower(a).placement().host_ops()
    assert node.kind.name == "Svd" and "takes no complex ones" in why
    np.testing.assert_allclose(f(a), jax.jit(jnp.linalg.pinv)(a), rtol=1e-4, atol=1e-6)
    small = a[:64]                                   # below the limit: on the device
    assert not rlx_jax.jit(jnp.linalg.pinv, backend="mlx").lower(small).placement().host
