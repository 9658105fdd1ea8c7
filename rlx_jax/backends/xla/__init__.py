"""The reference backend: re-emits JAX (jax.lax) from the IR and runs it under jax.jit."""
import jax
import numpy as np

from ...ir.interpret import interpret
from ...ir.ops import PRIMITIVE
from ..base import register_backend
from .rules import XLA_RULES


def _to_numpy(outs):
    return [np.asarray(o) for o in outs]


class XlaBackend:
    name = "xla"
    SUPPORTED_OPS = frozenset(PRIMITIVE)
    NATIVE_BACKWARD_OPS = frozenset()
    BACKWARD_OPS = frozenset()
    options = ()

    def available(self):
        return True

    def unavailable_reason(self):
        return ""

    def rules(self):
        """The lowering table (OpKind -> rule)."""
        return XLA_RULES

    def output_converter(self, output):
        """outs -> outs for jit's `output` option (None: the jax.Arrays as they are)."""
        return _to_numpy if output == "numpy" else None

    def lower(self, graph, **options):
        def run(*args):
            return interpret(graph, XLA_RULES, args, backend=self.name)
        return jax.jit(run)


XLA = register_backend(XlaBackend())
