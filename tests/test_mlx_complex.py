"""complex64 values on backend 'mlx' (complex_values.py) and gradients of linear algebra / FFT /
complex programs, against JAX on the CPU; where each op runs, exactly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax

mx = pytest.importorskip("mlx.core")

RNG = np.random.default_rng(1)


def crand(*shape, scale=1.0):
    return ((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)) * scale).astype(
        np.complex64)


def on_mlx(f, *args, native=True, **options):
    jitted = rlx_jax.jit(f, backend="mlx", output="numpy", **options)
    ops = jitted.lower(*args).placement().host_ops()
    if native:
        assert ops == []
    return jitted(*args), [(n.kind.name, why) for n, why in ops]


def check(got, want, rtol=1e-5, atol=1e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


UNARY = [jnp.negative, jnp.abs, jnp.sign, jnp.exp, jnp.log, jnp.log1p, jnp.sqrt, lax.rsqrt,
         jnp.square, jnp.sin, jnp.cos, jnp.tan, jnp.tanh, jnp.cosh, jnp.arcsin, jnp.arccos,
         jnp.arctan, jnp.arcsinh, jnp.arccosh, jnp.arctanh, lambda z: z ** 3,
         lambda z: lax.integer_pow(z, -2), jnp.conj, jnp.real, jnp.imag]
BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.divide, jnp.power, lax.max, lax.min,
          jnp.equal, jnp.not_equal]


@pytest.mark.parametrize("f", UNARY + BINARY)
def test_elementwise(f):
    z = np.concatenate([crand(40), crand(40, scale=10.0), crand(20, scale=1e-2),
                        np.array([1, -1, 1j, -2, 2 + 0j], np.complex64)])
    w = crand(z.size)
    args = (z,) if f in UNARY else (z, w)
    got, _ = on_mlx(f, *args)
    check(got, jax.jit(f)(*args), rtol=2e-5 if f is jnp.power else 1e-5)


@pytest.mark.parametrize("f", [
    lambda z, w: z @ w, lambda z, w: jnp.einsum("bij,bjk->bik", z, w),
    lambda z, w: jnp.sum(z * w, axis=1), lambda z, w: jnp.prod(z, axis=-1),
    lambda z, w: jnp.where(jnp.abs(z) > 1, z, w), lambda z, w: jnp.concatenate([z, w], 1),
    lambda z, w: z.transpose(0, 2, 1)[:, ::-1, 1:].reshape(2, -1),
    lambda z, w: z[:, jnp.array([2, 0]), :], lambda z, w: jnp.pad(z, ((0, 0), (1, 2), (0, 1))),
    lambda z, w: lax.dynamic_slice(z, (0, 1, 1), (2, 2, 2)),
    lambda z, w: lax.dynamic_update_slice(z, w[:, :1], (0, 2, 0)),
    lambda z, w: jnp.broadcast_to(z[:, :1], (2, 3, 3)),
    lambda z, w: (z.astype(jnp.float32), jnp.real(z).astype(jnp.complex64),
                  z.astype(jnp.int32), z.astype(bool), jnp.arange(3).astype(jnp.complex64)),
    lambda z, w: lax.complex(jnp.real(w), jnp.abs(z)) * 2j + 1,
])
def test_contractions_reductions_shapes_casts(f):
    z, w = crand(2, 3, 3), crand(2, 3, 3)
    z[0, 0, 0] = 3.7 - 2j                         # a cast to int32 truncates the real part
    got, _ = on_mlx(f, z, w)
    check(got, jax.jit(f)(z, w))


@pytest.mark.parametrize("f, reason", [
    (jnp.expm1, "Activation[fn=expm1] on complex64"),
    (jnp.sinh, "Activation[fn=sinh] on complex64"),
    (lambda z: jnp.max(z, axis=0), "Reduce[fn=max] on complex64"),
])
@pytest.mark.host("complex64 ops MLX has no kernel for, or gets wrong, run on the host")
def test_complex_ops_mlx_gets_wrong_run_on_the_host(f, reason):
    """Their results cross back to the MLX segment that multiplies them."""
    z = crand(3, 4)
    got, ops = on_mlx(lambda z: f(z) * z, z, native=False)
    assert len(ops) == 1 and reason in ops[0][1], ops
    check(got, jax.jit(lambda z: f(z) * z)(z))


@pytest.mark.parametrize("output", ["numpy", "jax", "native"])
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.host("complex64 ops MLX has no kernel for, or gets wrong, run on the host")
def test_complex_results_in_every_output_form(output, host):
    """complex64 crossing from and to a host segment, and returned in each of jit's forms."""
    z = crand(2, 3)

    def f(z):
        y = jnp.expm1(z) if host else jnp.exp(z)
        return y * z, jnp.abs(y)
    jitted = rlx_jax.jit(f, backend="mlx", output=output)
    assert len(jitted.lower(z).placement().host_ops()) == int(host)
    got = jitted(z)
    kind = {"numpy": np.ndarray, "jax": jax.Array, "native": mx.array}[output]
    assert all(isinstance(g, kind) for g in got), [type(g) for g in got]
    check([np.asarray(g) for g in got], jax.jit(f)(z))
    again = jitted(*got[:1])                       # a result fed back in
    check([np.asarray(g) for g in again], jax.jit(f)(np.asarray(got[0])))


def _spd(a):
    return a @ jnp.swapaxes(a, -1, -2) + 4 * jnp.eye(a.shape[-1])


def _sym(a):
    return a + jnp.swapaxes(a, -1, -2)


GRADS = [
    ("cholesky", lambda a: jnp.sum(jnp.linalg.cholesky(_spd(a)) ** 2)),
    ("eigh", lambda a: jnp.sum(jnp.linalg.eigh(_sym(a))[0] ** 3)
     + jnp.sum(jnp.abs(jnp.linalg.eigh(_sym(a))[1][..., 0]) ** 2 * jnp.arange(4.0))),
    ("svd", lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False) ** 2)
     + jnp.sum(jnp.abs(jnp.linalg.svd(a, full_matrices=False)[0][..., :1]))),
    ("qr", lambda a: jnp.sum(jnp.linalg.qr(a)[1] ** 2) + jnp.sum(jnp.linalg.qr(a)[0][..., 0])),
    ("triangular_solve", lambda a: jnp.sum(lax.linalg.triangular_solve(
        jnp.tril(a) + 4 * jnp.eye(4), jnp.cos(a), left_side=True, lower=True) ** 2)),
    ("solve/det (lu)", lambda a: jnp.sum(jnp.linalg.solve(a + 4 * jnp.eye(4), jnp.sin(a)))
     + jnp.sum(jnp.linalg.det(a + 4 * jnp.eye(4)))),
    ("fft", lambda a: jnp.sum(jnp.abs(jnp.fft.fft(a.astype(jnp.complex64) * (1 + 2j))) ** 2)),
    ("rfft/irfft", lambda a: jnp.sum(jnp.fft.irfft(jnp.fft.rfft(a) * 1j, n=4) ** 2
                                     + jnp.abs(jnp.fft.rfft2(a)).sum())),
    ("complex", lambda a: jnp.sum(jnp.abs(lax.complex(a, jnp.sin(a)) ** 2 * jnp.exp(1j * a)))),
]


@pytest.mark.parametrize("name, f", GRADS, ids=[n for n, _ in GRADS])
@pytest.mark.parametrize("batch", [(), (2,)])
@pytest.mark.host("complex64 ops MLX has no kernel for, or gets wrong, run on the host")
@pytest.mark.eager("mx.compile of the complex eigh gradient fails inside MLX "
                   "(IndexError: _Map_base::at): it runs eagerly, equal to JAX")
def test_grad_matches_jax(name, f, batch):
    a = RNG.standard_normal((*batch, 4, 4)).astype(np.float32)

    def loss(a):
        return f(a) if not batch else jnp.sum(jax.vmap(f)(a))
    got, _ = on_mlx(jax.grad(loss), a)
    want = jax.jit(jax.grad(loss))(a)
    check(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


FFTS_ND = {
    "fft2": lambda z: jnp.fft.fft2(z),
    "ifftn": lambda z: jnp.fft.ifftn(z, axes=(-3, -2, -1)),
    "rfft2": lambda z: jnp.fft.rfft2(z.real),
    "irfft2": lambda z: jnp.fft.irfft2(z, s=(16, 30)),
}


@pytest.mark.parametrize("name", sorted(FFTS_ND))
def test_multi_axis_ffts_equal_jax_bit_for_bit(name):
    """Given:  FFTs over 2 and 3 axes of a complex64 [2, 16, 32, 16]
       Result: jax.jit's values exactly (MLX's 1-D FFT is XLA's; the complex transforms are
               taken from the last axis to the first, as XLA takes them), on the device"""
    z = crand(2, 16, 32, 16)
    got, _ = on_mlx(FFTS_ND[name], z)
    want = np.asarray(jax.jit(FFTS_ND[name])(z))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
