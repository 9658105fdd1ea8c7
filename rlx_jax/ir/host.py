"""A JAX primitive kept as it is in the IR (OpKind.HostPrimitive), for primitives the frontend
has no rule for (some linear algebra and special functions, host callbacks, and any other
primitive without effects, frontend/trace.py: no_rule): the node holds the primitive and a
`HostParams` of its params, its reference semantics bind the primitive, and since only the
reference backend (xla) claims the kind, it runs on the host between device segments
(placement/plan.py) on every other backend.

Given / Result (`jnp.linalg.cholesky(a)` on backend "coreml"):
    %2:f32[3,3] = HostPrimitive[primitive=cholesky, params={symmetrize_input}] %1
    -> placed in a host segment, run as `cholesky_p.bind(a, symmetrize_input=False)` under jax.jit
"""


class HostParams:
    """A primitive's params as an IR attribute: hashed by identity, printed by their names, and
    `why` (the reason the primitive has no RLX kind) for the placement report. `effectful`: the
    eqn has effects (a debug print or callback), so the node runs even when nothing reads its
    results (ir/rewrite.dce keeps it)."""

    def __init__(self, params, why, effectful=False):
        self.params, self.why, self.effectful = dict(params), why, bool(effectful)

    def __repr__(self):
        return "{" + ", ".join(sorted(self.params)) + "}"

    __str__ = __repr__


def bind(*operands, primitive, params):
    """The reference semantics of a HostPrimitive node: the primitive itself, bound as
    jax.core.eval_jaxpr binds it (`get_bind_params` turns the params of a primitive holding a
    sub-jaxpr, a call-like one, into what its bind takes; other primitives keep theirs)."""
    out = primitive.bind(*operands, **primitive.get_bind_params(params.params))
    return tuple(out) if primitive.multiple_results else out
