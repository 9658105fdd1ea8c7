"""A pytest plugin that puts a bug into one lowering rule, to show that no test passes with it:

    RLX_JAX_INJECT_BUG=mil:TopK RLX_JAX_CACHE_DIR=$(mktemp -d) \\
        python -m pytest -p tests.inject_bug -q -k "top_k and coreml"

`<table>:<Kind>` names the rule: `mil` (Core ML's MIL_RULES), `mlx` (MLX_RULES) or `decomp`
(the decompositions every backend's legalization uses). The rule is replaced by one that
raises TypeError; every test that lowers such a node must then fail, since a bug in a rule
is a LoweringError under every fallback setting. Use an empty cache directory: a Core ML
package already built by the correct rule is loaded without lowering anything.
"""
import functools
import os

from rlx_jax.ir.ops import OpKind


def _tables():
    from rlx_jax.backends.coreml.mil.table import MIL_RULES   # the package fills it
    from rlx_jax.backends.mlx import lower  # noqa: F401  (fills MLX_RULES)
    from rlx_jax.backends.mlx.table import MLX_RULES
    from rlx_jax.passes.decompose import DECOMPS
    return {"mil": MIL_RULES, "mlx": MLX_RULES, "decomp": DECOMPS}


def pytest_configure(config):
    spec = os.environ.get("RLX_JAX_INJECT_BUG")
    if not spec:
        return
    table, kind = spec.split(":")
    rules, kind = _tables()[table], OpKind[kind]
    rule = rules[kind]

    @functools.wraps(rule)
    def bug(*args, **kwargs):
        raise TypeError(f"bug injected into {spec}")
    rules[kind] = bug
