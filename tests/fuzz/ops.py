"""Imports every op-generator module so the table in registry.py is complete."""
from . import (ops_elementwise, ops_index, ops_linalg, ops_reduce, ops_shape,  # noqa: F401
               ops_window)
from .registry import OPS  # noqa: F401
