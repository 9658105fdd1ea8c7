"""JAXPR_RULES: JAX primitive name -> rule(ctx, *operands, **params) building IR nodes.

One table, filled by the family modules below. A primitive with no rule is kept as it is
(OpKind.HostPrimitive, ir/host.py: it runs as JAX on the host, in reported segments) when jit's
fallback is "host", and refused with fallback="error"; UNSUPPORTED gives the reason shown for
some of them. Always refused: those in REFUSED (XLA's stateful generator, io_callback,
all_to_all, shard_map), and any unlisted primitive whose eqn has effects, which host segments
do not keep (frontend/trace.py: no_rule).
"""
from ...tables import rule_table

JAXPR_RULES, jaxpr_rule = rule_table("JAXPR_RULES")

UNSUPPORTED = {
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

REFUSED = frozenset(("rng_uniform", "io_callback", "all_to_all", "shard_map"))
HOST_RUNNABLE = frozenset(UNSUPPORTED) - REFUSED     # the listed ones kept with fallback="host"

from . import elementwise, dot, reduce, shape, index, conv, control, random  # noqa: E402,F401
from . import decompositions  # noqa: E402,F401
from . import nn  # noqa: E402,F401
from . import collectives  # noqa: E402,F401

for _name in UNSUPPORTED:
    assert _name not in JAXPR_RULES, _name
assert REFUSED <= set(UNSUPPORTED), REFUSED - set(UNSUPPORTED)
