"""The MLX backend: IR -> MLX ops (MLX_RULES) -> one `mx.compile`d function.

Runs on Metal on macOS and on the CPU on Linux (`mlx[cpu]`). Its own option (given to
`rlx_jax.jit`): `compile=False` (run MLX eagerly, without `mx.compile`). Its native results
are `mx.array`s (`output="native"`).
"""
from ...errors import BadArgumentError
from ..base import Backend

try:
    import mlx.core  # noqa: F401
    _IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any import failure makes the backend unavailable
    _IMPORT_ERROR = f"`import mlx.core` failed ({type(e).__name__}: {e}); " \
                    f"install `mlx` (macOS) or `mlx[cpu]` (Linux)"


class MlxBackend(Backend):
    name = "mlx"
    options = ("compile",)

    def available(self):
        return _IMPORT_ERROR is None

    def unavailable_reason(self):
        return _IMPORT_ERROR or ""

    def rules(self):
        """The lowering table (OpKind -> rule, with each rule's claim), every family
        loaded."""
        from .lower import MLX_RULES
        return MLX_RULES

    def check_options(self, options):
        if not isinstance(options.get("compile", True), bool):
            raise BadArgumentError(f"backend 'mlx': compile={options['compile']!r}; it must be "
                                   f"True or False")

    def output_converter(self, output, weak=()):
        """outs -> outs for jit's `output` option (None: the mx.arrays as they are)."""
        from .runtime import output_converter
        return output_converter(output, weak)

    def owns_array(self, x):
        return type(x).__module__.startswith("mlx")

    def host_array(self, x):
        """An mx.array, evaluated, as numpy (a view; bfloat16 through a uint16 view)."""
        import mlx.core as mx
        from .runtime import to_numpy
        mx.eval(x)
        return to_numpy(x)

    def array_input(self, x, dtype):
        """An mx.array of `dtype`; a jax.Array an MLX program returned is its own mx.array."""
        from .runtime import to_mx
        return to_mx(x, dtype)

    def numpy_dtype(self, dtype):
        if not type(dtype).__module__.startswith("mlx"):
            return None
        from .runtime import mlx_to_np_dtype
        return mlx_to_np_dtype(dtype)

    def prepare(self, graph, **options):
        """The graph as MLX lowers it: a float32 Cast of a bfloat16 elementwise op is the op in
        float32, as XLA computes it (passes/excess_precision.py)."""
        from ...passes.excess_precision import widen_casts
        return widen_casts(graph)

    def host_reasons(self, graph, known, **options):
        """{id(node): reason} of the top-level nodes MLX cannot run here (placement/plan.py)."""
        from .lower import host_reasons
        return host_reasons(graph, known)

    def lower(self, graph, name=None, **options):
        """The executable of a device graph; consecutive all-reduces (a pmean of a gradient
        pytree) become one (combine.py)."""
        from .combine import combine_all_reduces
        from .lower import lower
        return lower(combine_all_reduces(graph), name=name, **options)

    def build_program(self, graph, name=None, **options):
        """MLX primitive counts / DOT text of the lowered graph (`Lowered.op_counts("backend")`)."""
        from .combine import combine_all_reduces
        from .lower import build_program
        return build_program(combine_all_reduces(graph), name=name, **options)

