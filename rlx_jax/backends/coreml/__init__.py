"""Core ML backend: IR -> MIL program -> .mlpackage, run by Core ML (macOS) or the MIL
reference executor (elsewhere)."""
from ..base import register_backend
from .backend import CoremlBackend
from .export import export_coreml

COREML = register_backend(CoremlBackend())

__all__ = ["COREML", "CoremlBackend", "export_coreml"]
