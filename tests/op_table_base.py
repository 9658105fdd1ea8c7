"""Op-table helpers: the divergence record and the small helpers that build cases (tests/cases.py
records) over dtypes.

A case is a JAX function plus an argument maker; the oracle is JAX itself on CPU. Helpers here
keep the per-family modules (op_table_*.py) compact: one call generates a case per dtype, named
`<op>_<dtype>` with the dtype's tolerance.
"""
import dataclasses

import jax.numpy as jnp
import numpy as np

from .cases import Case


@dataclasses.dataclass(frozen=True)
class Expect:
    """A known divergence of one backend on one case."""
    reason: str
    error: str = None                   # name of the rlx_jax.errors class the backend must raise
    host: bool = False                  # runs, with these ops placed on the host (the reason)
    atol: float = None                  # looser tolerances on that backend
    rtol: float = None


F32, F16, BF16 = "float32", "float16", "bfloat16"
I32, U32, BOOL = "int32", "uint32", "bool"
FLOATS = (F32, F16, BF16)
INTS = (I32, U32)
SHORT = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", U32: "u32", BOOL: "bool",
         "float64": "f64", "int64": "i64", "uint64": "u64", "int8": "i8", "uint8": "u8",
         "int16": "i16", "uint16": "u16", "complex64": "c64"}
# (atol, rtol) per dtype; low-precision floats compare at a few ulps of their own precision
TOL = {F32: (1e-5, 1e-5), F16: (5e-3, 5e-3), BF16: (3e-2, 3e-2), "float64": (1e-12, 1e-12)}


def arr(dtype, *shape, lo=-3, hi=3, special=()):
    """Random array maker of `dtype` and `shape`, values in [lo, hi]; `special` values (nan,
    inf, -0.0, ...) overwrite the first entries."""
    dtype = jnp.dtype(dtype)

    def make(r):
        if dtype == jnp.bool_:
            a = r.rand(*shape) > 0.5
        elif jnp.issubdtype(dtype, jnp.integer):
            info = jnp.iinfo(dtype)
            a = r.randint(max(lo, int(info.min)), min(hi, int(info.max)) + 1,
                          shape).astype(dtype)
        else:
            a = r.uniform(lo, hi, shape).astype(dtype)
        if special:
            flat = a.reshape(-1)
            flat[:len(special)] = np.asarray(special).astype(dtype)
            a = flat.reshape(shape)
        return a
    return make


def f32(*shape, lo=-2.0, hi=2.0, special=()):
    return arr(F32, *shape, lo=lo, hi=hi, special=special)


def ties(dtype, *shape, n=3):
    """Maker of small integral values in `dtype`: many ties, exact in every dtype."""
    return lambda r: r.randint(0, n, shape).astype(jnp.dtype(dtype))


def const(value, dtype):
    """Maker returning a fixed array (for exact-semantics cases)."""
    return lambda r: np.asarray(value, dtype=jnp.dtype(dtype))


def args(*makers):
    return lambda r: tuple(m(r) for m in makers)


def is_float(dtype):
    return jnp.issubdtype(jnp.dtype(dtype), jnp.floating)


def over(name, fn, dtypes, makers, grad=False, scale=1.0, static_argnums=()):
    """One case per dtype: `makers(dtype)` returns the argument maker; `grad` applies to f32.

    `scale` loosens the dtype tolerance (for transcendental functions with steep slopes)."""
    out = []
    for dt in dtypes:
        atol, rtol = TOL.get(dt, (0.0, 0.0))
        out.append(Case(f"{name}_{SHORT[dt]}", fn, makers(dt), grad=grad and dt == F32,
                        atol=atol * scale, rtol=rtol * scale, static_argnums=static_argnums))
    return out
