"""The device probe: what of a graph would a backend run on the device, and what on the host?

`supports(backend, graph)` legalizes the graph for the backend as `rlx_jax.jit` does (kept
kinds native, the rest decomposed), asks the backend what it cannot run
(plan.place) and returns a `Support`: true when nothing would be host-placed, with
`host` listing the ops that would run on the host and why.
"""


class Support:
    """Truthy when `backend` runs every op of the graph; `host` is [(node, reason)]."""

    def __init__(self, backend, host):
        self.backend, self.host = backend, host

    def __bool__(self):
        return not self.host

    def __repr__(self):
        if not self.host:
            return f"Support({self.backend!r}: every op on the device)"
        ops = ", ".join(f"{n.kind.name}" + (f" at {n.src}" if n.src else "")
                        for n, _ in self.host)
        return f"Support({self.backend!r}: {len(self.host)} op(s) on the host: {ops})"


def supports(backend, graph):
    """The Support of `graph` on `backend` (a backend object; `rlx_jax.backends.supports`
    also takes a name)."""
    from .plan import place
    placed = place(graph, backend)
    return Support(backend.name, placed.host_ops())
