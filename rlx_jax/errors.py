"""Errors users see. Every message names what failed, where (the user's file:line) and what to do."""


class RlxError(Exception):
    """Base class of every error rlx_jax raises on purpose."""


class UnsupportedPrimitiveError(RlxError):
    """The traced program uses JAX primitives the frontend has no rule for."""


class IRTypeError(RlxError):
    """A node was built with operands of the wrong shape or dtype."""


class LegalizationError(RlxError):
    """Nodes the chosen backend neither lowers nor can decompose."""


class LoweringError(RlxError):
    """A backend rule could not lower a node it claims (e.g. a dtype or attribute it lacks)."""


class BadArgumentError(RlxError, TypeError):
    """Bad call: wrong pytree, missing/unhashable static argument, unknown backend or option."""


class ArgumentRangeError(RlxError, ValueError):
    """A call's argument holds values outside those its compiled program was built for (e.g. a
    uint32 or int64 argument beyond int32 range on Core ML, which computes integers in int32)."""


class BackendUnavailableError(RlxError):
    """The requested backend cannot run on this machine."""


class UnsupportedTransformationError(RlxError):
    """`Jitted.lower` / `Jitted.trace` was called on JAX tracers (inside jax.grad, jax.vmap,
    jax.jit, ...); calling the function itself there works (it binds rlx_call)."""
