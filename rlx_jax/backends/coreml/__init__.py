"""Core ML backend: IR -> MIL program -> .mlpackage, run by Core ML (macOS) or the MIL
reference executor (elsewhere). `rlx_jax.export_coreml` (rlx_jax/export.py) saves the package."""
from ..base import register_backend
from .backend import CoremlBackend

COREML = register_backend(CoremlBackend())

__all__ = ["COREML", "CoremlBackend"]
