"""The backend interface (`Backend`) and registry.

A backend is one subclass of `Backend`: a `name`, `rules()` (its lowering table) and
`lower(graph, **options) -> Executable` (a callable taking one array per graph input and
returning a list of outputs); every other hook is declared here with the default that means
"nothing special", so the rest of rlx_jax calls hooks, never probes for them.

The claim tables (SUPPORTED_OPS, NATIVE_BACKWARD_OPS, BACKWARD_OPS, CLAIM_PREDICATES) are
derived from `rules()` when that is a tables.LoweringTable, whose rules are registered with
their claims; a backend may set them as class attributes instead (xla: every primitive kind).

Backends register themselves when their package is imported; the `rlx_jax.backends` package
imports every one of them, so the registry is complete as soon as this module is importable.
"""
import collections
import functools

import numpy as np

from ..errors import BackendUnavailableError, BadArgumentError
from ..ir.ops import OpKind
from ..tables import DECOMPOSED, NATIVE, NATIVE_BACKWARD, LoweringTable


class Executable:
    """What `Backend.lower` may return (any callable also does: xla returns a jax.jit
    function): called with one array per graph input, returns the list of outputs.

    `runtime` names what runs it, read at each call site (MLX: "mlx-compiled", or
    "mlx-eager" after an mx.compile failure, with `why_uncompiled`); None means the backend's
    name. `converts_output`: it applies jit's `output` option itself."""
    runtime = None
    converts_output = False
    why_uncompiled = None

    def __call__(self, *arrays):
        raise NotImplementedError


def runtime_of(executable, backend) -> str:
    """What runs `executable` (Executable.runtime; a plain callable: the backend's name)."""
    runtime = executable.runtime if isinstance(executable, Executable) else None
    return runtime or backend.name


# Bound by the interpreter loop itself, claimed by every backend.
BOUNDARY = frozenset({OpKind.Input})


class Backend:
    """What a backend is. Subclass it, set `name`, implement `rules` and `lower`, and
    override the hooks it needs."""
    name: str = None  # type: ignore[assignment]  # None on the base only: each backend names itself
    # kinds no rule lowers that `prepare` rewrites
    REWRITTEN_OPS: frozenset[OpKind] = frozenset()
    options: tuple[str, ...] = ()        # the jit options of this backend alone
    # whether `lower` takes graphs with symbolic dimensions, giving one program for every size
    # (Core ML's flexible inputs); other backends get each size's instantiated graph
    symbolic_programs = False
    # whether placement folds what reads no argument before lowering (placement/fold.py); the
    # xla reference does not: XLA folds on its own
    folds_constants = True

    def _claimed(self, claim):
        if not self.available():
            raise BackendUnavailableError(f"backend {self.name!r} is not available here: "
                                          f"{self.unavailable_reason()}")
        table = self.rules()
        if not isinstance(table, LoweringTable):
            raise NotImplementedError(
                f"backend {self.name!r}: its rules() is not a tables.LoweringTable, so its "
                f"claims cannot be derived; register its rules with their claims, or set "
                f"SUPPORTED_OPS, NATIVE_BACKWARD_OPS, BACKWARD_OPS and CLAIM_PREDICATES on "
                f"the class")
        return table.kinds(claim)

    @functools.cached_property
    def SUPPORTED_OPS(self):             # noqa: N802 - the seed tables' names
        """Kinds lowered natively (the rules claimed NATIVE, and Input)."""
        return BOUNDARY | self._claimed(NATIVE)

    @functools.cached_property
    def NATIVE_BACKWARD_OPS(self):       # noqa: N802
        """Backward kinds lowered natively (kept for programs with native backward kinds)."""
        return self._claimed(NATIVE_BACKWARD)

    @functools.cached_property
    def BACKWARD_OPS(self):              # noqa: N802
        """Backward kinds run only by decomposition (declared, with no rule)."""
        return self._claimed(DECOMPOSED)

    @functools.cached_property
    def CLAIM_PREDICATES(self):          # noqa: N802
        """{kind: fn(node) -> bool}: kinds claimed only on the nodes fn accepts."""
        self._claimed(NATIVE)
        return dict(self.rules().predicates)

    def available(self):
        """Whether the backend can run on this machine."""
        return True

    def unavailable_reason(self):
        """Why not, when `available()` is False."""
        return ""

    def rules(self):
        """The lowering table (OpKind -> rule)."""
        raise NotImplementedError(f"backend {self.name!r} has no lowering table")

    def lower(self, graph, name=None, **options):
        """The Executable (or a plain callable) of a legalized graph that runs whole on the
        device."""
        raise NotImplementedError(f"backend {self.name!r} does not lower graphs")

    def prepare(self, graph, **options):
        """The legalized graph as it will be lowered (Core ML: complex values as float32
        pairs, ranks <= 5; `options`: the backend's options); placement runs it before
        looking for host ops."""
        return graph

    def host_reasons(self, graph, known, **options):
        """{id(node): reason} of the top-level nodes of `graph` that must run on the host,
        beyond `known` (the unclaimed ones)."""
        return {}

    def value_bounds(self, graph):
        """{value id: (lo, hi)} proven for integer values, given to device segments' Inputs;
        None: the backend proves none."""
        return None

    def check_options(self, options):
        """Raises BadArgumentError for a bad value of one of this backend's `options`."""

    def output_converter(self, output, weak=()):
        """outs -> outs for jit's `output` option (None: the results as they are). `weak`: the
        jaxpr's weak type per result, which jax.Arrays made here may carry at once
        (jax_arrays.from_numpy); results left strongly typed are re-typed after."""
        return None

    def owns_array(self, x):
        """Whether `x` is an array of this backend's own array library (MLX: an mx.array)."""
        return False

    def host_array(self, x):
        """One of the arrays this backend's executables return (or one it owns) as an array
        every backend accepts: numpy, or a jax.Array."""
        return np.asarray(x)

    def array_input(self, x, dtype):
        """`x` (numpy, a jax.Array, or an array this backend owns) as the array its
        executables take, of IR dtype `dtype` (Core ML: numpy; MLX: mx.array; xla:
        jax.Array). A RefusalError when it cannot hold such an array."""
        return np.asarray(x)

    def numpy_dtype(self, dtype):
        """The numpy dtype of a dtype object of this backend's array library (MLX: an
        mx.Dtype), None for any other object."""
        return None

    def build_program(self, graph, name=None, **options):
        """The backend-level program (`Lowered.op_counts("backend")`, `as_text("backend")`)."""
        raise BadArgumentError(f"backend '{self.name}' has no backend-level program; use "
                               f"level='ir'")

    def direct_call(self, jitted):
        """A cheaper cached call for the api.Jitted `jitted` (xla: jax.jit's own dispatch,
        xla/direct.py), or None (Jitted's own path). The object returned has `usable()`
        (whether to take it now) and `call`, called as the function is; `call` raises
        NotCompiled for a signature Jitted has not compiled, TypeError/OverflowError for
        arguments it does not take (Jitted then takes its own path, and stops using `call`
        after a TypeError)."""
        return None

    def wrap_executable(self, executable, lowered):
        """The executable jit calls (Core ML: a host run for integer arguments beyond int32
        under fallback="host")."""
        return executable


class NotCompiled(Exception):
    """A direct call (Backend.direct_call) has no program for this signature yet."""


_BACKENDS: dict[str, Backend] = {}
AUTO_ORDER = ("mlx", "coreml", "xla")


def register_backend(backend):
    if backend.name in _BACKENDS:
        raise KeyError(f"duplicate backend {backend.name}")
    _BACKENDS[backend.name] = backend
    return backend


def unregister_backend(name):
    """Removes backend `name` from the registry (a backend a test or a plugin added)."""
    _BACKENDS.pop(name)


def all_backends() -> dict[str, Backend]:
    """{name: backend} of every registered backend (available here or not)."""
    return dict(_BACKENDS)


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine, in `backend="auto"` order."""
    backends = all_backends()
    return [n for n in AUTO_ORDER if n in backends and backends[n].available()]


def kept_kinds(backend, native_backward=True):
    """The kinds legalization keeps for `backend`: SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS
    (= SUPPORTED_OPS_TRAINING), minus every backward kind when `native_backward` is False.
    BACKWARD_OPS (backward kinds run only by decomposition) are never kept."""
    from ..ir.ops import BACKWARD
    keep = frozenset(backend.SUPPORTED_OPS) | frozenset(backend.NATIVE_BACKWARD_OPS)
    keep -= frozenset(backend.BACKWARD_OPS) - frozenset(backend.NATIVE_BACKWARD_OPS)
    if not native_backward:
        keep -= BACKWARD
    return Claims(keep, backend.CLAIM_PREDICATES)


class Claims(frozenset):
    """Kinds legalization keeps, plus `predicates` ({kind: fn(node) -> bool}, a backend's
    optional CLAIM_PREDICATES): a node of such a kind is kept only when its predicate holds
    (e.g. a kernel that handles some attribute configurations); otherwise it is decomposed."""

    def __new__(cls, kinds, predicates=None):
        self = super().__new__(cls, kinds)
        self.predicates = dict(predicates or {})
        return self


def get_backend(name):
    """The backend called `name` ("auto": the first available in AUTO_ORDER)."""
    backends = all_backends()
    if name == "auto":
        names = available_backends()
        if not names:
            raise BackendUnavailableError("no backend is available here")
        return backends[names[0]]
    if name not in backends:
        raise BadArgumentError(
            f"unknown backend {name!r}; choose one of {sorted(backends) + ['auto']}")
    b = backends[name]
    if not b.available():
        raise BackendUnavailableError(
            f"backend {name!r} is not available here: {b.unavailable_reason()}. "
            f"Available: {available_backends()}")
    return b


class ClaimTables(collections.namedtuple("ClaimTables", (
        "backend", "SUPPORTED_OPS", "NATIVE_BACKWARD_OPS", "BACKWARD_OPS",
        "SUPPORTED_OPS_TRAINING", "CLAIM_PREDICATES"))):
    """A backend's claim tables as the RLX seeds spell them; SUPPORTED_OPS_TRAINING is
    SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS, CLAIM_PREDICATES the kinds claimed on some nodes."""

    @classmethod
    def of(cls, backend):
        s, nb = frozenset(backend.SUPPORTED_OPS), frozenset(backend.NATIVE_BACKWARD_OPS)
        return cls(backend.name, s, nb, frozenset(backend.BACKWARD_OPS), s | nb,
                   frozenset(backend.CLAIM_PREDICATES))

    def __str__(self):
        lines = [f"claim tables of backend {self.backend!r}"]
        for field in self._fields[1:]:
            kinds = sorted(k.name for k in getattr(self, field))
            lines.append(f"{field} ({len(kinds)}): {', '.join(kinds) or '-'}")
        return "\n".join(lines)
