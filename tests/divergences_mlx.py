"""Known divergences of the mlx backend from JAX on CPU (case name -> Expect), each with its reason."""
from .op_table import Expect

DIVERGENCES = {}
