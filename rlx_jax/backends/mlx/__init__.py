"""MLX backend: IR -> MLX ops -> one `mx.compile`d function (backend.py: the Backend class;
lower.py: the program builder and its rule families; runtime.py: arrays and the executable)."""
from ..base import register_backend
from .backend import MlxBackend

MLX = register_backend(MlxBackend())

__all__ = ["MLX", "MlxBackend"]
