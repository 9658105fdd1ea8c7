"""JAXPR_RULES: JAX primitive name -> rule(ctx, *operands, **params) building IR nodes.

One table, filled by the family modules below. UNSUPPORTED lists primitives that have no rule
yet, each with the reason shown to users. Those in HOST_RUNNABLE are kept as they are
(OpKind.HostPrimitive, ir/host.py) when jit's fallback is "host", so they run as JAX on the
host; the others (another PRNG implementation's generator, all_to_all) are always refused.
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
    **{p: "this linear-algebra primitive has no RLX kind yet" for p in (
        "schur", "householder_product", "tridiagonal", "tridiagonal_solve")},
    **{p: "this special function has no RLX kind yet" for p in ("igamma", "igammac", "igamma_grad_a", "random_gamma_grad",
                                "polygamma", "zeta", "bessel_i0e", "bessel_i1e",
                                "regularized_incomplete_beta", "clz")},
    **{p: "host callbacks have no RLX kind (they call back into Python)" for p in (
        "pure_callback", "debug_callback", "debug_print")},
    "io_callback": "io_callback orders its effects, which host segments do not keep; call it "
                   "outside rlx_jax.jit",
    "all_to_all": "all_to_all has no RLX kind yet (psum, pmax, pmin, all_gather, "
                  "psum_scatter, axis_index and ppermute do: rlx_jax.jit(axis_name=...))",
    "shard_map": "shard_map's mesh is JAX's devices; rlx_jax runs one program per process: "
                 "use rlx_jax.jit(fn, axis_name=...) and rlx_jax.distributed",
}

HOST_RUNNABLE = frozenset(
    ("schur", "householder_product", "tridiagonal", "tridiagonal_solve", "igamma", "igammac",
     "igamma_grad_a", "random_gamma_grad", "polygamma", "zeta", "bessel_i0e", "bessel_i1e",
     "regularized_incomplete_beta", "clz", "pure_callback", "debug_callback", "debug_print"))

from . import elementwise, linalg, reduce, shape, index, conv, control, random  # noqa: E402,F401
from . import decompositions  # noqa: E402,F401
from . import nn  # noqa: E402,F401
from . import collectives  # noqa: E402,F401

for _name in UNSUPPORTED:
    assert _name not in JAXPR_RULES, _name
assert HOST_RUNNABLE <= set(UNSUPPORTED), HOST_RUNNABLE - set(UNSUPPORTED)
