"""`lax.rng_bit_generator` as XLA computes it on CPU and GPU, in uint32 jnp arithmetic.

The bit generator of JAX's 'rbg' and 'unsafe_rbg' PRNG implementations. Its default algorithm
(RNG_DEFAULT) is XLA's Philox4x32-10 on those platforms, and JAX checks nothing beyond it, so
the bits are what a user of `jax.jit` gets on CPU: frontend/rules/random.py translates this
function in place of the primitive, for every backend, and tests/test_rbg.py holds it to
`lax.rng_bit_generator` under plain JAX.

How XLA reads the key (`uint32[4]` = two little-endian uint64 words s0, s1): the Philox key is
s0's two halves; the 128-bit counter of the j-th block of four outputs is (low = s1 + j, high =
s0, plus the carry out of low). A block's four words are laid out in turn (output 4j + w is
word w of block j); narrower dtypes keep the low bits of a 32-bit output, 64-bit outputs are
two consecutive words (low first), two per block. The new key is s0 and s1 advanced by the
number of blocks drawn. The multiplications are split into 16-bit halves (no uint64 needed:
MLX and Core ML have none here).

    >>> key = jnp.array([1, 2, 3, 4], jnp.uint32)
    >>> new, bits = rng_bit_generator(key, shape=(5,), dtype=np.dtype("uint32"))
    >>> new.tolist(), bits[:2].tolist()
    ([1, 2, 5, 4], [512747620, 1298009047])
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

M0, M1 = 0xD2511F53, 0xCD9E8D57          # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # key schedule (Weyl) increments
ROUNDS = 10
FLAT_LIMIT = 2 ** 31 - 1                 # above: each element from its own block (MLX's shapes
                                         # are int32, so no flat array of all the words)


def _u32(v):
    return jnp.uint32(v)


def mul_hilo(x, c):
    """(high, low) 32-bit words of uint32 x times the constant c, exactly."""
    xl, xh = x & _u32(0xFFFF), x >> _u32(16)
    cl, ch = _u32(c & 0xFFFF), _u32(c >> 16)
    ll, lh, hl, hh = xl * cl, xl * ch, xh * cl, xh * ch       # each below 2**32
    mid = (ll >> _u32(16)) + (lh & _u32(0xFFFF)) + (hl & _u32(0xFFFF))
    high = hh + (lh >> _u32(16)) + (hl >> _u32(16)) + (mid >> _u32(16))
    return high, x * _u32(c)


def philox4x32(x, key):
    """Philox4x32-10 of the counter words x = (x0, x1, x2, x3) under key (k0, k1)."""
    k0, k1 = key
    for _ in range(ROUNDS):
        h0, l0 = mul_hilo(x[0], M0)
        h1, l1 = mul_hilo(x[2], M1)
        x = (h1 ^ x[1] ^ k0, l1, h0 ^ x[3] ^ k1, l0)
        k0, k1 = k0 + _u32(W0), k1 + _u32(W1)
    return x


def _add64(lo, hi, n):
    """(lo, hi) + n for uint32 words of a uint64 and a uint32 n (broadcast): words and carry."""
    new_lo = lo + n
    carry = (new_lo < lo).astype(jnp.uint32)
    new_hi = hi + carry
    return new_lo, new_hi, ((new_hi < hi) & (carry > 0)).astype(jnp.uint32)


def iota_2x32(shape):
    """(hi, lo) uint32 words of the row-major uint64 iota of `shape` (each axis below 2**32):
    the sum over axes of the axis's iota times its stride, each product exact (mul_hilo) and
    each sum carried, as JAX's iota_2x32_shape computes it in uint64."""
    hi = lo = None
    stride = 1
    for axis in reversed(range(len(shape))):
        if shape[axis] > 1:
            idx = lax.broadcasted_iota(jnp.uint32, shape, axis)
            p_hi, p_lo = mul_hilo(idx, stride & 0xFFFFFFFF)
            p_hi = p_hi + idx * _u32((stride >> 32) & 0xFFFFFFFF)
            lo, hi = (p_lo, p_hi) if lo is None else _add64(lo, hi + p_hi, p_lo)[:2]
        stride *= shape[axis]
    if lo is None:
        hi = lo = jnp.zeros(shape, jnp.uint32)
    return hi, lo


def _blocks(words, count):
    """The `count` Philox output blocks for key words (a0, a1, a2, a3), and the new key."""
    a0, a1, a2, a3 = (words[i] for i in range(4))
    j = jnp.arange(count, dtype=jnp.uint32)
    c0, c1, carry = _add64(a2, a3, j)
    c2, c3, _ = _add64(a0, a1, carry)
    out = philox4x32((c0, c1, c2, c3), (a0, a1))
    n0, n1, _ = _add64(a2, a3, _u32(count))
    return out, jnp.stack([a0, a1, n0, n1])


def by_element(words, hi, lo):
    """The uint32 outputs of the elements whose flat indices i have the uint32 words (hi, lo),
    each from its own block: element i is word i % 4 of block i // 4."""
    a0, a1, a2, a3 = (words[i] for i in range(4))
    j_lo, j_hi, w = (lo >> _u32(2)) | (hi << _u32(30)), hi >> _u32(2), lo & _u32(3)
    c0 = a2 + j_lo
    t = a3 + j_hi
    c1 = t + (c0 < a2).astype(jnp.uint32)
    c2, c3, _ = _add64(a0, a1, ((t < a3) | (c1 < t)).astype(jnp.uint32))
    out = philox4x32((c0, c1, c2, c3), (a0, a1))
    return jnp.select([w == _u32(k) for k in range(3)], list(out[:3]), out[3])


def _advance(words, count):
    """The key after `count` blocks (a Python int below 2**64): s1 advanced, s0 kept."""
    a0, a1, a2, a3 = (words[i] for i in range(4))
    n0, n1, _ = _add64(a2, a3, _u32(count & 0xFFFFFFFF))
    return jnp.stack([a0, a1, n0, n1 + _u32(count >> 32)])


def _interleave(words, n):
    return jnp.stack(words, axis=1).reshape(-1)[:n]


def rng_bit_generator(key, *, shape, dtype, elementwise=False):
    """(new key, bits of `dtype` and `shape`): lax.rng_bit_generator with RNG_DEFAULT or
    RNG_PHILOX, for a uint32[4] key (or a uint64[2] one under jax_enable_x64). Draws of more
    than FLAT_LIMIT words (or any, with elementwise) compute each element from its own block."""
    dtype = np.dtype(dtype)
    wide = key.dtype == np.uint64
    words = jnp.stack([key & jnp.uint64(0xFFFFFFFF), key >> jnp.uint64(32)], axis=1) \
        .reshape(4).astype(jnp.uint32) if wide else key
    n = int(np.prod(shape, dtype=np.int64))
    if n > FLAT_LIMIT or elementwise:
        if dtype == np.uint64:
            raise ValueError(f"uint64 draws of {n} elements (above {FLAT_LIMIT}) are not "
                             f"computed here")
        bits, new = by_element(words, *iota_2x32(tuple(shape))), _advance(words, -(-n // 4))
    elif dtype == np.uint64:            # other dtypes: 32-bit outputs, converted as XLA does
        b, new = _blocks(words, -(-2 * n // 4))
        halves = [b[0].astype(jnp.uint64) | (b[1].astype(jnp.uint64) << jnp.uint64(32)),
                  b[2].astype(jnp.uint64) | (b[3].astype(jnp.uint64) << jnp.uint64(32))]
        bits = _interleave(halves, n)
    else:
        b, new = _blocks(words, -(-n // 4))
        bits = _interleave(list(b), n)
    if wide:
        new = new.reshape(2, 2).astype(jnp.uint64)
        new = new[:, 0] | (new[:, 1] << jnp.uint64(32))
    return new, bits.astype(dtype).reshape(shape)
