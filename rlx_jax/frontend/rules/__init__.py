"""JAXPR_RULES: JAX primitive name -> rule(ctx, *operands, **params) building IR nodes.

One table, filled by the family modules below. UNSUPPORTED lists primitives that have no rule
yet, each with the reason shown to users.
"""
from ...ir.interpret import rule_table

JAXPR_RULES, jaxpr_rule = rule_table("JAXPR_RULES")

_CONTROL = "control flow lowers in a later release; use Python loops/conditionals over static " \
           "values, or run this part outside rlx_jax.jit"
_RANDOM = "randomness is not supported yet; draw random numbers outside rlx_jax.jit and pass " \
          "them in as arguments"
UNSUPPORTED = {
    **{p: _CONTROL for p in ("cond", "while", "scan")},
    **{p: _RANDOM for p in ("random_seed", "random_wrap", "random_unwrap", "random_split",
                            "random_bits", "random_fold_in", "threefry2x32", "random_gamma",
                            "rng_bit_generator", "rng_uniform")},
    "custom_linear_solve": "linear solvers are not supported",
    "while_loop": _CONTROL,
}

from . import elementwise, linalg, reduce, shape, index, conv  # noqa: E402,F401
from . import nn  # noqa: E402,F401

for _name in UNSUPPORTED:
    assert _name not in JAXPR_RULES, _name
