"""Native MLX rules of the high-level and backward kinds against their decompositions on the
xla backend (and so against each other's semantics), one node at a time, over tests/nn_cases."""
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.base import all_backends, kept_kinds
from rlx_jax.ir.ops import BACKWARD, FORWARD, PRIMITIVE
from rlx_jax.passes.legalize import legalize

from .test_decomp import CASES, single_node_graph

pytestmark = pytest.mark.skipif("mlx" not in rlx_jax.available_backends(),
                                reason="mlx is not installed")
NATIVE = [c for c in CASES if c.kind in (FORWARD | BACKWARD)]


def _np(x):
    from rlx_jax.backends.mlx.runtime import to_numpy
    return to_numpy(x) if type(x).__module__.startswith("mlx") else np.asarray(x)


def test_high_level_claims_are_the_tested_native_rules():
    from rlx_jax.backends.mlx import claims
    from rlx_jax.backends.mlx.lower import MLX_RULES
    native = {k for k in MLX_RULES if k in FORWARD | BACKWARD}
    assert native == (claims.SUPPORTED_OPS | claims.NATIVE_BACKWARD_OPS) & (FORWARD | BACKWARD)
    assert native <= {c.kind for c in NATIVE}          # every claimed kind has a case below
    assert claims.NATIVE_BACKWARD_OPS == native & BACKWARD


@pytest.mark.parametrize("case", NATIVE, ids=lambda c: c.name)
def test_native_rule_matches_xla_decomposition(case):
    mlx_be, xla_be = all_backends()["mlx"], all_backends()["xla"]
    if case.kind not in kept_kinds(mlx_be):
        pytest.skip(f"{case.kind.name} is not claimed by mlx")
    args = [m(np.random.RandomState(0)) for m in case.operands]
    graph, _ = single_node_graph(case.kind, [(a.shape, a.dtype) for a in args], case.attrs)
    native = legalize(graph, kept_kinds(mlx_be), backend="mlx")
    assert native.op_counts() == {case.kind.name: 1}            # kept as one native node
    decomposed = legalize(graph, PRIMITIVE, backend="xla")
    assert case.kind not in decomposed.kinds()
    got = mlx_be.lower(native, name=case.name)(*args)
    want = xla_be.lower(decomposed, name=case.name)(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = _np(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, case.name
        np.testing.assert_allclose(g, w, atol=max(case.atol, 1e-5), rtol=1e-4,
                                   err_msg=case.name)
