"""FFTs on Core ML as exact real DFT matmuls on (re, im) pairs of float32 values.

MIL has no complex tensors and no FFT op. An Fft node (`lax.fft` semantics: fft / ifft /
rfft / irfft over the last len(fft_lengths) axes) is done one axis at a time, each as a DFT:
the axis is moved last and multiplied by constant real matrices, W = A + iB of size n x m,
(xr + i xi)(A + iB) = (xr A - xi B) + i(xr B + xi A): four MatMuls for a complex input, two
for a real one (rfft) or a real result (irfft). The entries are computed in float64 from the
exact angle 2*pi*((j*k) mod n)/n, scaled (1/n for the inverse, the Hermitian weights for
irfft) and rounded to float32 once. rfft transforms its last axis first (real to half
spectrum) and then the others; irfft inverts the leading axes first and the last one last,
as a real matrix that ignores the imaginary parts of the DC and Nyquist bins (lax.fft's
convention).

A DFT costs O(n^2) per transform (an FFT O(n log n)) and its two n x m float32 matrices are
constants of the model (8 n m bytes per length). Measured on this 2-core Linux machine
(`benchmarks/bench_coreml_fft.py`, one run; x: f32[8, n]; rfft to its parts, irfft from
them, both wholly on Core ML; error: max |y - exact| / max |exact| against numpy's float64
FFT; time: one call of the MIL reference executor, NumPy, not Core ML's speed, over
`jax.jit(jnp.fft...)` on the CPU):

    n      err rfft / irfft   jnp.fft's     MIL ops   MFLOP   constants   executor / jax
    64     2.2e-7 / 1.6e-7    0.9 / 1.0e-7   4 / 8     0.07    0.02 MB     124x / 136x
    256    3.9e-7 / 3.7e-7    1.1 / 1.2e-7   4 / 8     1.06    0.25 MB      34x /  36x
    512    5.3e-7 / 4.5e-7    1.5 / 1.3e-7   4 / 8     4.21    1.00 MB     432x / 423x
    1024   5.4e-7 / 4.0e-7    1.4 / 1.4e-7   4 / 8    16.8     4.01 MB     747x / 302x
    2048   4.6e-7 / 4.2e-7    1.3 / 1.5e-7   4 / 8    67.2    16.0 MB      381x / 761x
    4096   4.1e-7 / 4.5e-7    1.3 / 1.3e-7   4 / 8   268.6    64.0 MB      558x / 535x

The error stays 3-4x jnp.fft's at every length (the matrices are exact to float32); what
grows is the work (2.1 MFLOP per length-1024 rfft, ~40x an FFT's 5 n log2 n) and the model's
constants, quadratically: 4 MB per rfft length and 8 MB per complex one at n = 1024, 16 and
32 MB at 2048. MAX_LENGTH = 1024 keeps both moderate; an Fft with a transformed axis longer
than that runs on the host (JAX's FFT), with that reason in the placement report.

Given / Result (`jnp.fft.rfft(x)`, x: f32[2, 16]):
    c:complex64[2,9] = Fft[fft_type=rfft, fft_lengths=(16,)] x
    ->  re:f32[2,9] = MatMul x A;  im:f32[2,9] = MatMul x B   (A, B: f32[16, 9] constants)
"""
import numpy as np

from ....ir.ops import OpKind as K

# The longest transformed axis lowered as a DFT (see the module docstring's measurements).
MAX_LENGTH = 1024
F32 = np.dtype(np.float32)


def dft_matrices(n, m, inverse=False, hermitian=False):
    """(A, B): the float32 real and imaginary parts of the n x m DFT matrix W[j, k] =
    exp(-+2 pi i j k / n) (scaled by 1/n when `inverse`). With `hermitian`, the n//2+1 x n
    matrices of the half-spectrum inverse (irfft): rows weighted 1 (DC, Nyquist) or 2, the
    imaginary row parts of DC and Nyquist zero, so y = Xr A + Xi B."""
    if hermitian:
        k = np.arange(n // 2 + 1)[:, None]
        j = np.arange(n)[None, :]
    else:
        j = np.arange(n)[:, None]
        k = np.arange(m)[None, :]
    theta = 2.0 * np.pi * ((j * k) % n).astype(np.float64) / n
    cos, sin = np.cos(theta), np.sin(theta)
    cos[np.abs(cos) < 1e-15] = 0.0                  # exact zeros at quarter turns
    sin[np.abs(sin) < 1e-15] = 0.0
    if hermitian:
        w = np.full((n // 2 + 1, 1), 2.0)
        w[0] = 1.0
        if n % 2 == 0:
            w[-1] = 1.0
        a, b = w * cos / n, -w * sin / n
        b[0] = 0.0
        if n % 2 == 0:
            b[-1] = 0.0
    elif inverse:
        a, b = cos / n, sin / n
    else:
        a, b = cos, -sin
    return a.astype(F32), b.astype(F32)


def too_long(node):
    """The reason an Fft node is not lowered as a DFT (None: it is)."""
    longest = max(node.attrs["fft_lengths"])
    if longest <= MAX_LENGTH:
        return None
    return (f"an Fft over an axis of length {longest} > {MAX_LENGTH}: Core ML has no FFT op, "
            f"and a DFT by real matmuls costs O(n^2) per transform and 8·n² bytes of model "
            f"constants per length, so transforms longer than {MAX_LENGTH} run on the host "
            f"(JAX's FFT)")


class Dft:
    """Emits the DFT of (re, im) pairs into a builder; `pairs` is the ComplexPairs algebra
    (passes/complex_pairs.py) that holds the constants and the pair helpers."""

    def __init__(self, pairs, b):
        self.p, self.b = pairs, b

    def _matrices(self, n, m, inverse=False, hermitian=False):
        key = ("dft", n, m, inverse, hermitian)
        return self.p.constant(self.b, key, lambda: dft_matrices(n, m, inverse, hermitian))

    def _along(self, x, axis, fn):
        """fn applied to the pair x with `axis` moved last, moved back after."""
        nd = self.p.ndim(x)
        if axis == nd - 1:
            return fn(x)
        perm = [a for a in range(nd) if a != axis] + [axis]
        back = [perm.index(a) for a in range(nd)]
        return self.p.transpose(self.b, fn(self.p.transpose(self.b, x, perm)), back)

    def _c2c(self, x, n, inverse):
        a, b = self._matrices(n, n, inverse)
        return self.p.matmul(self.b, x, (a, b))

    def _r2c(self, x, n):
        a, b = self._matrices(n, n // 2 + 1)
        return self.p.matmul(self.b, (x[0], None), (a, b))

    def _c2r(self, x, n):
        a, b = self._matrices(n, n // 2 + 1, hermitian=True)
        y = self.b.add(K.MatMul, (x[0], a))
        if x[1] is None:
            return y
        return self.b.binary("add", y, self.b.add(K.MatMul, (x[1], b)))

    def lower(self, node, x):
        """The node's result: a pair (fft, ifft, rfft) or a float32 value (irfft); `x` is the
        operand as a pair (a real operand: (x, None))."""
        kind, lengths = node.attrs["fft_type"], tuple(node.attrs["fft_lengths"])
        nd = self.p.ndim(x)
        axes = list(range(nd - len(lengths), nd))
        if kind in ("fft", "ifft"):
            for axis, n in zip(axes, lengths):
                x = self._along(x, axis, lambda v, n=n: self._c2c(v, n, kind == "ifft"))
            return x
        if kind == "rfft":
            x = self._r2c(x, lengths[-1])
            for axis, n in zip(axes[:-1], lengths[:-1]):
                x = self._along(x, axis, lambda v, n=n: self._c2c(v, n, False))
            return x
        for axis, n in zip(axes[:-1], lengths[:-1]):
            x = self._along(x, axis, lambda v, n=n: self._c2c(v, n, True))
        return self._c2r(x, lengths[-1])
