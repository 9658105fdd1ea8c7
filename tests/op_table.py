"""The op table: one record per case, crossed with every available backend by test_ops.py.

A case is a JAX function plus an argument maker; the oracle is JAX itself on CPU. Known
divergences of a backend are data with a reason, never `if` chains: they live in
tests/divergences_<backend>.py as DTYPE_DIVERGENCES = {dtype name: Expect(...)} where the reason
is the dtype and DIVERGENCES = {case name: Expect(...)} where it is the case, resolved by
tests/divergences.py. The cases live in per-family modules (op_table_*.py); CASES concatenates
them.
"""
from . import (op_table_conv, op_table_elementwise, op_table_index, op_table_linalg,
               op_table_reduce, op_table_shape)
from .op_table_base import Case, Expect, arr, args, const, f32, over  # noqa: F401

CASES = (op_table_elementwise.CASES + op_table_reduce.CASES + op_table_shape.CASES
         + op_table_index.CASES + op_table_conv.CASES + op_table_linalg.CASES)

_names = [c.name for c in CASES]
assert len(_names) == len(set(_names)), sorted({n for n in _names if _names.count(n) > 1})
