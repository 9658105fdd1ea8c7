"""The reference backend: each kind's reference semantics (ir/reference.py) re-emitted as JAX
under jax.jit (backend.py)."""
from ..base import register_backend
from .backend import XlaBackend

XLA = register_backend(XlaBackend())

__all__ = ["XLA", "XlaBackend"]
