"""Known divergences of the reference `xla` backend: none. It re-emits jax.lax from the IR, so
every op-table case must match JAX exactly (up to the case's tolerance); a failure here is a
frontend or reference-rule bug, never an entry in this table."""
DIVERGENCES = {}
