"""Errors users see. Every message names what failed, where (the user's file:line) and what to do."""


class RlxError(Exception):
    """Base class of every error rlx_jax raises on purpose."""


class UnsupportedPrimitiveError(RlxError):
    """The traced program uses JAX primitives the frontend has no rule for."""


class UnsupportedDtypeError(UnsupportedPrimitiveError, TypeError):
    """The traced program holds a value of a dtype the IR cannot: a custom element type
    (`jax.dtypes.extended`) other than JAX's PRNG keys."""


class IRTypeError(RlxError):
    """A node was built with operands of the wrong shape or dtype."""


class LegalizationError(RlxError):
    """Nodes the chosen backend neither lowers nor can decompose."""


class LoweringError(RlxError):
    """A node could not be lowered. Raised as it is, it is a bug: an exception inside a lowering
    rule (MIL, MLX, a decomposition), named with the node, the user's file:line and the rule,
    the original exception chained; it surfaces under every `fallback` setting."""


class RefusalError(LoweringError):
    """A rule declines a node on purpose, with its reason (a configuration the backend cannot
    express: a bitwise op on Core ML, a dtype MLX lacks). The only error that sends a node to
    the host under fallback="host"; with fallback="error" the program is refused, naming it."""


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


class ShapeConstraintError(RlxError, ValueError):
    """A call's argument shapes do not fit the function's symbolic shapes: a dimension breaks
    a declared constraint, two arguments disagree on one symbol, or a fixed dimension differs.
    Raised before anything runs, naming the symbol, the values and the constraint."""


class SymbolicShapeError(RlxError):
    """A program traced with symbolic dimensions cannot be kept symbolic where it is asked to
    be: JAX cannot decide a shape relation the program needs (e.g. that `t` is even for a
    reshape), or an op or backend needs a dimension's value; names the op, its line and why."""
