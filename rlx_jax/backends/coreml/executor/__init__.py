"""The MIL reference executor: runs a saved .mlpackage's MIL program op by op, as the strictest
reader of Core ML's spec (reference.py; control flow in control.py, ops coremltools gives no
value for in ops.py and nn.py, the least convenient readings in strict.py)."""
from .reference import MilReferenceExecutor

__all__ = ["MilReferenceExecutor"]
