"""Known divergences of the mlx backend from JAX on CPU (case name -> Expect), each with its reason."""
from .op_table import Expect

DIVERGENCES = {
    "conv_i32_i32": Expect(
        reason="MLX convolutions accept floating-point operands only; an exact integer "
               "convolution is not lowered (LoweringError names the node)",
        error="LoweringError"),
}
