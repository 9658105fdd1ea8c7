"""The reference backend: runs each primitive kind's reference semantics (ir/reference.py, JAX
code) under jax.jit. Collectives (ops.COLLECTIVES) run only for a group of one process, where
their reference is their meaning; over more processes they are refused (backend="mlx" runs
them). The re-emitted program is rlx_jax's code: it is traced under JAX's default numpy rules
(numpy_rules.py), whatever the caller's."""
import jax
import numpy as np

from ...debug_checks import unchecked
from ...errors import RefusalError
from ...ir.interpret import interpret, where
from ...ir.ops import COLLECTIVES, CONTROL, HOST_ONLY, PRIMITIVE, OpKind
from ...ir.reference import evaluate
from ...numpy_rules import own_numpy_rules
from ..base import Backend


def _run(ctx, node, *operands):
    return evaluate(node, *operands)


# Every primitive kind lowers to its reference (control flow to lax.switch / while_loop / scan
# over its regions); the high-level kinds are decomposed.
XLA_RULES = {kind: _run for kind in (PRIMITIVE | CONTROL | HOST_ONLY) - {OpKind.Input}}  # interpret binds Inputs


def refuse_collectives(graph):
    """Raises RefusalError for a collective of `graph` over more than one process."""
    for n in graph.walk():
        if n.kind in COLLECTIVES and n.attrs["axis_size"] > 1:
            raise RefusalError(
                f"collectives over more than one process run only on backend=\"mlx\" "
                f"(mx.distributed): `{n.text()}`{where(n)} spans {n.attrs['axis_size']} "
                f"processes of axis {n.attrs['axis_name']!r}. The xla reference (which also "
                f"runs the host segments of other backends, Core ML's collectives among them) "
                f"runs collectives only in a group of one process")


def _to_numpy(outs):
    return [np.asarray(o) for o in outs]


_JAX_TAKES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def _taking_any_array(call):
    """`call` (the jax.jit function) taking other libraries' arrays too (an mx.array as its
    numpy view, which jax.jit then copies); `.jitted` stays the jax.jit function."""
    def run(*args):
        if all(isinstance(a, _JAX_TAKES) for a in args):
            return call(*args)
        return call(*[a if isinstance(a, _JAX_TAKES) else np.asarray(a) for a in args])
    run.jitted = call.jitted
    return run


class XlaBackend(Backend):
    name = "xla"
    folds_constants = False            # XLA folds constants itself
    # the reference claims every primitive kind and nothing else (its rules are JAX itself)
    SUPPORTED_OPS = PRIMITIVE | CONTROL | HOST_ONLY
    NATIVE_BACKWARD_OPS = BACKWARD_OPS = frozenset()
    CLAIM_PREDICATES = {}

    def rules(self):
        """The lowering table (OpKind -> rule)."""
        return XLA_RULES

    def output_converter(self, output, weak=()):
        """outs -> outs for jit's `output` option (None: the jax.Arrays as they are)."""
        return _to_numpy if output == "numpy" else None

    def host_array(self, x):
        return x

    def array_input(self, x, dtype):
        return x if isinstance(x, jax.Array) else jax.device_put(np.asarray(x))

    def direct_call(self, jitted):
        from .direct import DirectCall
        return DirectCall.of(jitted)

    def lower(self, graph, **options):
        refuse_collectives(graph)

        def run(*args):
            with own_numpy_rules():
                return interpret(graph, XLA_RULES, args, backend=self.name)
        return _taking_any_array(unchecked(jax.jit(run)))

