"""rlx_jax: run JAX programs on MLX and Core ML through the RLX IR."""
from . import errors
from .api import Compiled, Jitted, Lowered, jit
from .backends.base import available_backends
from .export import export_coreml
from .backends.coreml.package.compress import report as compression_report
from .frontend.trace import trace
from .version import __version__
from . import nn  # noqa: E402
from . import testing  # noqa: E402
from . import distributed  # noqa: E402

__all__ = ["jit", "trace", "available_backends", "export_coreml", "compression_report",
           "errors", "nn", "testing", "distributed", "Jitted", "Lowered", "Compiled",
           "__version__"]
