"""FFTs and complex numbers on Core ML as float32 (re, im) pairs (backends/coreml/
coreml/passes/complex_pairs.py, coreml/passes/complex_dft.py), against `jax.jit` of the same function on CPU.

Tolerances: an FFT result within 2e-6 · max|JAX's result| (a length-n DFT in float32 sums n
products: the measured error is 1e-7 to 5e-7 of the largest magnitude up to n = 256;
jnp.fft's own is 1e-7); elementwise complex arithmetic rtol 1e-6 (abs, division: one or two
float32 ulps from XLA's); gradients 1e-5 of the largest magnitude.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax import errors
from rlx_jax.backends.coreml.passes import complex_dft

R = np.random.RandomState(0)


def f32(*shape):
    return R.randn(*shape).astype(np.float32)


def c64(*shape):
    return (R.randn(*shape) + 1j * R.randn(*shape)).astype(np.complex64)


def _check(fn, args, rel=2e-6, device_only=True):
    """Runs fn on Core ML and under jax.jit; every result within rel · max|JAX's|. Returns
    the placement."""
    jitted = rlx_jax.jit(fn, backend="coreml")
    got, want = jitted(*args), jax.jit(fn)(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=rel * max(np.max(np.abs(w)), 1e-30))
    placed = jitted.lower(*args).placement()
    if device_only:
        assert placed.host_ops() == [], str(placed)
    return placed


def _parts(fn):
    """fn on a complex value given as real parts, its complex result returned as parts: the
    program is real-in, real-out."""
    def parts(re, im):
        y = fn(re + 1j * im)
        return (y.real, y.imag) if jnp.iscomplexobj(y) else y
    return parts


# (name, function of one complex or real value, argument shape): every fft_type, 1-3 axes,
# even and odd lengths, batched and not
FFTS = [
    ("fft-1-even", lambda z: jnp.fft.fft(z), (3, 16)),
    ("fft-1-odd", lambda z: jnp.fft.fft(z), (15,)),
    ("ifft-1-odd", lambda z: jnp.fft.ifft(z), (2, 3, 9)),
    ("fft-2", lambda z: jnp.fft.fft2(z), (2, 6, 5)),
    ("ifft-2", lambda z: jnp.fft.ifft2(z), (4, 8)),
    ("fft-3", lambda z: jnp.fft.fftn(z, axes=(-3, -2, -1)), (2, 4, 3, 6)),
    ("ifft-3", lambda z: jnp.fft.ifftn(z, axes=(-3, -2, -1)), (3, 5, 4)),
    ("irfft-1-even", lambda z: jnp.fft.irfft(z, n=16), (3, 9)),
    ("irfft-1-odd", lambda z: jnp.fft.irfft(z, n=15), (2, 2, 8)),
    ("irfft-2", lambda z: jnp.fft.irfft2(z, s=(6, 8)), (2, 6, 5)),
    ("irfft-2-odd", lambda z: jnp.fft.irfft2(z, s=(5, 7)), (5, 4)),
    ("irfft-3", lambda z: jnp.fft.irfftn(z, s=(4, 6, 5), axes=(-3, -2, -1)), (2, 4, 6, 3)),
]
RFFTS = [
    ("rfft-1-even", lambda x: jnp.fft.rfft(x), (4, 32)),
    ("rfft-1-odd", lambda x: jnp.fft.rfft(x), (21,)),
    ("rfft-2", lambda x: jnp.fft.rfft2(x), (2, 6, 8)),
    ("rfft-2-odd", lambda x: jnp.fft.rfft2(x), (7, 5)),
    ("rfft-3", lambda x: jnp.fft.rfftn(x, axes=(-3, -2, -1)), (2, 4, 6, 5)),
]


@pytest.mark.parametrize("name,fn,shape", FFTS, ids=[c[0] for c in FFTS])
def test_complex_input_ffts_run_on_core_ml(name, fn, shape):
    _check(_parts(fn), (f32(*shape), f32(*shape)))


@pytest.mark.parametrize("name,fn,shape", RFFTS, ids=[c[0] for c in RFFTS])
def test_rffts_run_on_core_ml(name, fn, shape):
    _check(lambda x: (fn(x).real, fn(x).imag), (f32(*shape),))


def test_rfft_is_two_matmuls_with_the_exact_dft_matrices():
    """Given: the parts of rfft(x), x: f32[2, 16]. Result: two MatMuls by constants equal to
    the DFT matrix computed in float64 and rounded to float32 once."""
    lowered = rlx_jax.jit(lambda x: (jnp.fft.rfft(x).real, jnp.fft.rfft(x).imag),
                          backend="coreml").lower(f32(2, 16))
    assert lowered.op_counts() == {"MatMul": 2}
    a, b = complex_dft.dft_matrices(16, 9)
    exact = np.exp(-2j * np.pi * np.outer(np.arange(16), np.arange(9)) / 16)
    for got, want in ((a, exact.real), (b, exact.imag)):     # float32-rounded float64
        np.testing.assert_allclose(got, want, rtol=2.0 ** -24, atol=1e-14)
        assert np.all(got[np.abs(want) < 1e-14] == 0)        # exact zeros at quarter turns
    consts = [n.attrs["value"] for n in lowered.legalized.nodes if n.kind.name == "Constant"]
    assert any(np.array_equal(c, a) for c in consts) and any(np.array_equal(c, b)
                                                            for c in consts)


def test_irfft_ignores_the_imaginary_parts_of_dc_and_nyquist():
    """lax.fft's Hermitian convention: irfft reads only the real parts of bins 0 and n/2."""
    re, im = f32(2, 9), f32(2, 9)
    im[:, 0], im[:, 8] = 5.0, -7.0
    fn = _parts(lambda z: jnp.fft.irfft(z, n=16))
    _check(fn, (re, im))
    im2 = im.copy()
    im2[:, 0] = im2[:, 8] = 0.0
    got = rlx_jax.jit(fn, backend="coreml")
    np.testing.assert_array_equal(np.asarray(got(re, im)), np.asarray(got(re, im2)))


@pytest.mark.host("complex values at the boundary and long FFTs run on the host (under test)")
def test_complex_arguments_and_results_convert_on_the_host():
    """Given: fft of a complex64 argument, returned complex. Result: Real and Imag of the
    argument and the Complex of the result are the only host ops (3 segments); the parts
    cross: 2 · 96 B in and 2 · 96 B out."""
    placed = _check(jnp.fft.fft, (c64(2, 12),), device_only=False)
    assert [n.kind.name for n, _ in placed.host_ops()] == ["Real", "Imag", "Complex"]
    assert all("Core ML has no complex64 tensors" in why for _, why in placed.host_ops())
    assert [s.placement for s in placed.segments] == ["host", "device", "host"]
    assert placed.crossing_bytes() == 4 * 2 * 12 * 4


@pytest.mark.host("complex values at the boundary and long FFTs run on the host (under test)")
def test_a_real_program_result_from_a_real_fft_input_leaves_only_the_complex_result():
    placed = _check(jnp.fft.rfft, (f32(3, 10),), device_only=False)
    assert [n.kind.name for n, _ in placed.host_ops()] == ["Complex"]
    assert placed.crossing_bytes() == 2 * 3 * 6 * 4


def power_spectrum(x):
    return jnp.abs(jnp.fft.rfft(x)) ** 2


def test_power_spectrum_forward_and_gradient_run_on_core_ml():
    x, w = f32(4, 64), f32(33)
    _check(power_spectrum, (x,))
    _check(jax.grad(lambda x: jnp.sum(power_spectrum(x) * w)), (x,), rel=1e-5)


def test_power_spectrum_with_fallback_error_runs():
    x = f32(2, 16)
    got = rlx_jax.jit(power_spectrum, backend="coreml", fallback="error")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(power_spectrum)(x)),
                               rtol=0, atol=2e-6 * np.max(np.asarray(power_spectrum(x))))


B, C, N, MODES = 2, 3, 32, 6


def spectral_layer(x, wr, wi):
    """An FNO spectral convolution: rfft, the lowest modes mixed by complex weights, irfft."""
    xf = jnp.fft.rfft(x)                                       # [B, C, N//2+1]
    y = jnp.einsum("bim,iom->bom", xf[..., :MODES], wr + 1j * wi)
    yf = jnp.zeros((x.shape[0], wr.shape[1], N // 2 + 1), jnp.complex64)
    return jnp.fft.irfft(yf.at[..., :MODES].set(y), n=N)


def _fno_args():
    return f32(B, C, N), f32(C, C, MODES) / C, f32(C, C, MODES) / C


def test_spectral_layer_forward_runs_on_core_ml():
    _check(spectral_layer, _fno_args())


def test_spectral_layer_gradient_runs_on_core_ml():
    """jax.grad of the layer (JAX's AD of fft emits more ffts, complex mul, conj, pads, dynamic
    update slices and scatters) runs wholly on Core ML."""
    target = f32(B, C, N)
    loss = lambda x, wr, wi: jnp.sum((spectral_layer(x, wr, wi) - target) ** 2)
    _check(jax.grad(loss, argnums=(0, 1, 2)), _fno_args(), rel=1e-5)


def test_complex_arithmetic_on_pairs():
    """mul, div, conj, neg, abs, sum, dot, square and data movement on complex values built
    from real arguments: no host op, results as JAX's."""
    def f(a, b, c, d):
        z, w = a + 1j * b, c + 1j * d
        u = z * jnp.conj(w) / (w + 2.0) - (-z) ** 3
        v = jnp.concatenate([u[:, ::-1], jnp.pad(u, ((0, 0), (1, 0)))[:, :2]], axis=1)
        m = (v.T @ u).sum(axis=0) + jnp.square(z).reshape(-1)[:6]
        return jnp.abs(m), m.real, m.imag, jnp.abs(z * w)
    _check(f, (f32(4, 6), f32(4, 6), f32(4, 6), f32(4, 6)), rel=1e-5)


@pytest.mark.parametrize("scale", [1e-25, 1.0, 3e19])
def test_abs_of_complex_is_hypot_scaled_as_jax(scale):
    """sqrt(re² + im²) would underflow at 1e-25 and overflow at 3e19; the scaled form does
    not, and equals XLA's within one ulp."""
    re, im = f32(50) * np.float32(scale), f32(50) * np.float32(scale)
    re[:3], im[:3] = 0.0, [0.0, 1.0, -2.0]
    fn = lambda re, im: jnp.abs(re + 1j * im)
    got, want = rlx_jax.jit(fn, backend="coreml")(re, im), jax.jit(fn)(re, im)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2.5e-7, atol=0)


def test_division_matches_jax_for_small_and_large_denominators():
    a, b = f32(64), f32(64)
    c, d = f32(64) * np.float32(1e-3), f32(64) * np.float32(1e3)
    def f(a, b, c, d):
        q = (a + 1j * b) / (c + 1j * d)
        return q.real, q.imag
    _check(f, (a, b, c, d), rel=1e-6)


@pytest.mark.host("complex values at the boundary and long FFTs run on the host (under test)")
def test_ffts_above_the_length_limit_run_on_the_host_with_the_reason():
    n = 2 * complex_dft.MAX_LENGTH
    placed = _check(power_spectrum, (f32(2, n),), device_only=False)
    kinds = [(n.kind.name, why) for n, why in placed.host_ops()]
    assert [k for k, _ in kinds] == ["Fft", "Real", "Imag"]
    assert f"length {n} > {complex_dft.MAX_LENGTH}" in kinds[0][1]
    with pytest.raises(errors.LegalizationError, match=f"length {n} > "):
        rlx_jax.jit(power_spectrum, backend="coreml", fallback="error")(f32(2, n))


def test_the_length_limit_itself_is_lowered():
    n = complex_dft.MAX_LENGTH
    lowered = rlx_jax.jit(lambda x: jnp.fft.rfft(x).real, backend="coreml").lower(f32(1, n))
    assert lowered.placement().host_ops() == []
    assert lowered.op_counts() == {"MatMul": 1}


def test_rewritten_kinds_have_real_forms():
    from rlx_jax.backends.coreml.backend import CoremlBackend
    from rlx_jax.backends.coreml.passes.complex_rules import RULES
    assert CoremlBackend.REWRITTEN_OPS <= set(RULES)
    assert not CoremlBackend.REWRITTEN_OPS & CoremlBackend().SUPPORTED_OPS


def test_a_power_spectrum_exports_as_one_core_ml_program(tmp_path):
    path = rlx_jax.export_coreml(power_spectrum, f32(2, 16), path=str(tmp_path / "ps.mlpackage"))
    assert (tmp_path / "ps.mlpackage").is_dir() and path.endswith("ps.mlpackage")
