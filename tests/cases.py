"""The one record type for a test case, shared by every table of cases in the suite.

A case is named and carries what its family needs; fields a family does not use keep their
defaults. The families and the fields they use:

  op table (tests/op_table*.py, test_x64.py)   fn, args, grad, atol, rtol, static_argnums
  single-node kinds (tests/nn_cases.py)         kind, operands, attrs, atol
  rlx_jax.nn ops (tests/test_nn.py)             fn, ref, args, argnums, backward, forward
  programs (tests/programs.py)                  fn (the scalar loss), params, inputs, atol, rtol
  MLX rule corner cases (tests/test_mlx_rules.py) fn, args (a fixed tuple), atol, rtol
"""
import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Optional[Callable] = None       # the function under test (a program's loss)
    args: Optional[Callable] = None     # rng -> tuple of arrays
    grad: bool = False                  # also check jax.grad of sum(fn(...)) w.r.t. arg 0
    atol: float = 1e-5
    rtol: float = 1e-5
    static_argnums: tuple = ()
    # a single IR node of one kind (tests/nn_cases.py)
    kind: Any = None                    # rlx_jax.ir.ops.OpKind
    operands: tuple = ()                # rng -> array, one per operand
    attrs: Optional[dict] = None
    # an rlx_jax.nn op against its plain-jnp reference (tests/test_nn.py)
    ref: Optional[Callable] = None      # plain jnp
    argnums: tuple = ()                 # differentiated arguments
    backward: tuple = ()                # backward kinds expected in the grad IR (one node each)
    forward: Optional[str] = None       # the forward kind expected in the IR
    # a program: a scalar loss over (params, *inputs) (tests/programs.py)
    params: Optional[Callable] = None   # (rng, dtype) -> pytree of float arrays
    inputs: Optional[Callable] = None   # (rng, dtype) -> tuple of arrays
