"""The executable of a program with host segments: its segments run in order.

Device segments are the backend's own executables (one `.mlpackage` each on Core ML, content-
hash cached; one `mx.compile`d function each on MLX); host segments are legalized for and run
by the `xla` reference backend (jax on the CPU), so they have JAX's exact semantics. Each value
is kept in the array form its producer made ("numpy" for Core ML, "mx" for MLX, "jax" for xla)
and converted to the form a reader needs once per call: a value read by two segments of the
same backend is converted once, never twice.
"""
import jax
import numpy as np

from .backends.base import all_backends, kept_kinds
from .errors import RefusalError
from .ir.ops import OpKind
from .passes.legalize import legalize
from .passes.partition import DEVICE

FORMS = {"coreml": "numpy", "mlx": "mx", "xla": "jax"}


def _mx():
    import mlx.core as mx
    return mx


def _is_mx(x):
    return type(x).__module__.startswith("mlx")


def _to_numpy(x):
    if _is_mx(x):
        from .backends.mlx.runtime import to_numpy
        _mx().eval(x)
        return to_numpy(x)
    return np.asarray(x)


def to_form(x, form, dtype):
    """`x` (an array of any backend) as an array of `form` with `dtype`."""
    if form == "numpy":
        return _to_numpy(x)
    if form == "jax":
        return x if isinstance(x, jax.Array) else jax.device_put(_to_numpy(x))
    from .backends.mlx.runtime import to_mx
    return to_mx(x, dtype)


class PartitionedExecutable:
    """Callable on one array per graph input; returns the outputs as jit's `output` option
    asks (`converts_output`): results in the device backend's form go through its own output
    converter, and a result the device cannot hold (e.g. complex64 on MLX) comes back as a
    jax.Array (numpy for output="numpy"). `steps` are (segment, its executable, its array
    form); `last_crossings` counts the conversions of the latest call."""
    converts_output = True

    def __init__(self, placement, name, options, output="jax"):
        self.placement = placement
        graph, backend = placement.graph, placement.backend
        xla = all_backends()["xla"]
        self.steps = []
        for s in placement.segments:
            if s.placement == DEVICE:
                exe = backend.lower(s.graph, name=f"{name}.segment{s.index}", **options)
                form = FORMS[backend.name]
            else:
                exe = xla.lower(legalize(s.graph, kept_kinds(xla), backend="xla"))
                form = "jax"
            self.steps.append((s, exe, form))
        self.form = FORMS[backend.name]
        self._inputs = [(n.out.id, n.attrs["index"]) for n in graph.nodes
                        if n.kind is OpKind.Input]
        self._consts = {n.out.id: n.attrs["value"] for n in graph.nodes
                        if n.kind is OpKind.Constant}
        self.last_crossings = {"conversions": 0, "bytes": 0}
        self.output = output
        self._convert = backend.output_converter(output)
        self._held = None           # per output: can the device backend's array form hold it

    @property
    def runtime(self):
        """The device segments' runtime (read now: MLX may fall back to eager on a first call),
        with "+host"."""
        device = [exe for s, exe, _ in self.steps if s.placement == DEVICE]
        names = sorted({getattr(exe, "runtime", self.placement.backend.name) for exe in device})
        return ("/".join(names) if names else "none") + "+host"

    def __call__(self, *args):
        env = {vid: {"arg": args[i]} for vid, i in self._inputs}
        stats = {"conversions": 0, "bytes": 0}

        def get(v, form):
            forms = env.get(v.id)
            if forms is None:                       # a constant the graph returns directly
                forms = env[v.id] = {"numpy": self._consts[v.id]}
            if form not in forms:
                src = next(iter(forms.values()))
                forms[form] = to_form(src, form, v.dtype)
                if v.node.kind is not OpKind.Input:
                    stats["conversions"] += 1
                    stats["bytes"] += v.nbytes
            return forms[form]
        for s, exe, form in self.steps:
            outs = exe(*[get(v, form) for v in s.reads])
            for v, o in zip(s.writes, outs):
                env[v.id] = {form: o}
        self.last_crossings = stats
        return self._results(get)

    def _results(self, get):
        """The outputs; which of them the device backend cannot hold is learnt on the first
        call (its conversion raises) and remembered, so later calls try nothing."""
        if self._held is None:
            self._held = []
            for v in self.placement.graph.outputs:
                try:
                    get(v, self.form)
                    self._held.append(True)
                except RefusalError:         # no such array on the device backend
                    self._held.append(False)
        outs, native = [], []
        for i, (v, held) in enumerate(zip(self.placement.graph.outputs, self._held)):
            if held:
                outs.append(get(v, self.form))
                native.append(i)
            else:
                outs.append(get(v, "numpy" if self.output == "numpy" else "jax"))
        if self._convert is not None and native:
            for i, o in zip(native, self._convert([outs[i] for i in native])):
                outs[i] = o
        return outs
