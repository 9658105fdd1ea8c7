"""JAXPR_RULES: JAX primitive name -> rule(ctx, *operands, **params) building IR nodes.

One table, filled by the family modules below. UNSUPPORTED lists primitives that have no rule
yet, each with the reason shown to users.
"""
from ...ir.interpret import rule_table

JAXPR_RULES, jaxpr_rule = rule_table("JAXPR_RULES")

_RBG = "rng_bit_generator is the bit generator of the 'rbg' and 'unsafe_rbg' PRNG " \
       "implementations, which rlx_jax does not run; use the default threefry2x32 keys " \
       "(jax.random.key(seed) without impl=, jax_default_prng_impl unset)"
UNSUPPORTED = {
    "rng_bit_generator": _RBG,
    "rng_uniform": "lax.rng_uniform is XLA's stateful generator, which has no JAX semantics to "
                   "match; use jax.random with a key",
    "custom_linear_solve": "linear solvers are not supported",
    **{p: "complex numbers are not supported (Core ML and MLX kernels are real-valued)"
       for p in ("complex", "real", "imag", "conj")},
    **{p: "linear-algebra decompositions are not supported yet; compute them outside "
          "rlx_jax.jit" for p in ("cholesky", "lu", "qr", "svd", "eigh", "eig", "schur",
                                  "triangular_solve", "householder_product", "tridiagonal",
                                  "tridiagonal_solve", "lu_pivots_to_permutation")},
    "fft": "FFTs are not supported yet",
    **{p: "this special function has no rule yet; use one of the supported elementwise "
          "functions" for p in ("igamma", "igammac", "igamma_grad_a", "random_gamma_grad",
                                "polygamma", "zeta", "bessel_i0e", "bessel_i1e",
                                "regularized_incomplete_beta", "clz")},
    **{p: "host callbacks cannot run inside a compiled Core ML / MLX program; call them "
          "outside rlx_jax.jit" for p in ("pure_callback", "io_callback", "debug_callback",
                                          "debug_print")},
    **{p: "collectives need a device mesh; rlx_jax runs on one device" for p in (
        "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute", "reduce_scatter",
        "axis_index", "shard_map")},
}

from . import elementwise, linalg, reduce, shape, index, conv, control, random  # noqa: E402,F401
from . import nn  # noqa: E402,F401

for _name in UNSUPPORTED:
    assert _name not in JAXPR_RULES, _name
