"""Imports every op-generator module so the table in registry.py is complete."""
from . import ops_elementwise, ops_shape, ops_reduce, ops_index, ops_linalg  # noqa: F401
from .registry import OPS  # noqa: F401
