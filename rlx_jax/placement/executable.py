"""The executable of a program with host segments: its segments run in order.

Device segments are the backend's own executables (one `.mlpackage` each on Core ML, content-
hash cached; one `mx.compile`d function each on MLX); host segments are legalized for and run
by the `xla` reference backend (jax on the CPU), so they have JAX's exact semantics. Each value
is kept in the array form its producer made (Core ML: numpy, MLX: mx.array, xla: jax.Array) and
converted, through the backends' `host_array` / `array_input` hooks, to the form a reader needs
once per call: a value read by two segments of the same backend is converted once, never twice.
"""
import jax
import numpy as np

from ..backends.base import Executable, all_backends, kept_kinds, runtime_of
from ..errors import RefusalError
from ..ir.ops import OpKind
from ..passes.legalize import legalize
from .partition import DEVICE


def to_form(x, source, target, dtype, backends):
    """`x`, an array `source` made (a backend; None: a caller's argument, whose owner among
    `backends` is asked), as an array of `target`'s executables (Backend.host_array, then
    Backend.array_input)."""
    if source is None:
        source = next((b for b in backends if b.owns_array(x)), None)
    if source is not None:
        x = source.host_array(x)
    return target.array_input(x, dtype)


class PartitionedExecutable(Executable):
    """Callable on one array per graph input; returns the outputs as jit's `output` option
    asks (`converts_output`): results in the device backend's form go through its own output
    converter, and a result the device cannot hold (e.g. complex64 on MLX) comes back as a
    jax.Array (numpy for output="numpy"). `steps` are (segment, its executable, the backend
    running it); `last_crossings` counts the conversions of the latest call."""
    converts_output = True

    def __init__(self, placement, name, options, output="jax"):
        self.placement = placement
        graph, backend = placement.graph, placement.backend
        self.xla = xla = all_backends()["xla"]
        self._backends = tuple(all_backends().values())  # who may own an argument array
        self.steps = []
        for s in placement.segments:
            if s.placement == DEVICE:
                exe = backend.lower(s.graph, name=f"{name}.segment{s.index}", **options)
                self.steps.append((s, exe, backend))
            else:
                exe = xla.lower(legalize(s.graph, kept_kinds(xla), backend="xla"))
                self.steps.append((s, exe, xla))
        self._inputs = [(n.out.id, n.attrs["index"]) for n in graph.nodes
                        if n.kind is OpKind.Input]
        self._consts = {n.out.id: n.attrs["value"] for n in graph.nodes
                        if n.kind is OpKind.Constant}
        self.last_crossings = {"conversions": 0, "bytes": 0}
        self.output = output
        self._convert = backend.output_converter(output)
        self._held = None           # per output: can the device backend's array form hold it
        # outputs that are arguments returned as they are: copied, as jax.jit's results never
        # share an argument's buffer
        self._passed = [i for i, v in enumerate(graph.outputs) if v.node.kind is OpKind.Input]

    @property
    def runtime(self):
        """The device segments' runtime (read now: MLX may fall back to eager on a first call),
        with "+host"."""
        device = [exe for s, exe, _ in self.steps if s.placement == DEVICE]
        names = sorted({runtime_of(exe, self.placement.backend) for exe in device})
        return ("/".join(names) if names else "none") + "+host"

    def __call__(self, *args):
        # per value: {backend whose executables take this array (None: as given): array}
        env = {vid: {None: args[i]} for vid, i in self._inputs}
        stats = {"conversions": 0, "bytes": 0}

        def get(v, target):
            forms = env.get(v.id)
            if forms is None:                       # a constant the graph returns directly
                forms = env[v.id] = {None: self._consts[v.id]}
            if target not in forms:
                source, x = next(iter(forms.items()))
                forms[target] = to_form(x, source, target, v.dtype, self._backends)
                if v.node.kind is not OpKind.Input:
                    stats["conversions"] += 1
                    stats["bytes"] += v.nbytes
            return forms[target]
        for s, exe, runner in self.steps:
            outs = exe(*[get(v, runner) for v in s.reads])
            for v, o in zip(s.writes, outs):
                env[v.id] = {runner: o}
        self.last_crossings = stats
        return self._results(get)

    def _results(self, get):
        """The outputs; which of them the device backend cannot hold is learnt on the first
        call (its conversion raises) and remembered, so later calls try nothing."""
        backend = self.placement.backend
        if self._held is None:
            self._held = []
            for v in self.placement.graph.outputs:
                if np.dtype(v.dtype).kind == "V" or (
                        v.node.kind is OpKind.Constant and id(v.node) in self.placement.host):
                    self._held.append(False)     # float0, or a constant the device lacks
                    continue
                try:
                    get(v, backend)
                    self._held.append(True)
                except RefusalError:         # no such array on the device backend
                    self._held.append(False)
        outs, native = [], []
        for i, (v, held) in enumerate(zip(self.placement.graph.outputs, self._held)):
            if held:
                outs.append(get(v, backend))
                native.append(i)
            else:
                out = get(v, self.xla)
                outs.append(np.asarray(out) if self.output == "numpy" else out)
        if self._convert is not None and native:
            for i, o in zip(native, self._convert([outs[i] for i in native])):
                outs[i] = o
        for i in self._passed:
            outs[i] = _fresh(outs[i])
        return outs


def _fresh(x):
    """A copy of array `x` (an mx.array is a value no one mutates: kept)."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, jax.Array):
        return jax.numpy.array(x, copy=True)
    return x
