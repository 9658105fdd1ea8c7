"""fallback="host" for integer arguments Core ML cannot hold: a call whose uint32 / int64
argument is outside the range its Core ML program was built for (Core ML computes integers in
int32; legality.check_range) runs on the host instead of raising ArgumentRangeError: the same
program, legalized for the xla reference (jax on the CPU, the dtype's full range). Told, not
silent: the first such call logs a warning naming the argument, and `Compiled.runtime` ends in
"+host-for-range" from then on. With fallback="error" the ArgumentRangeError is raised."""
from absl import logging
import numpy as np

from ....errors import ArgumentRangeError
from ...base import Executable, runtime_of


def host_for_range(executable, lowered):
    """`executable` as a Core ML program with fallback="host" runs it (HostForRange), else as
    it is."""
    if lowered.fallback == "host":
        return HostForRange(executable, lowered)
    return executable


class HostForRange(Executable):
    def __init__(self, executable, lowered):
        self.executable, self.lowered = executable, lowered
        self.host, self.host_calls = None, 0
        self.converts_output = executable.converts_output
        # an executable that converts its results itself (host segments) gets the host's
        # results converted here too, to the `output` jit asked for
        self._convert = lowered.backend.output_converter(
            lowered.options.get("output", "jax")) if self.converts_output else None

    @property
    def runtime(self):
        inner = runtime_of(self.executable, self.lowered.backend)
        return inner + "+host-for-range" if self.host_calls else inner

    @property
    def why_uncompiled(self):
        return self.executable.why_uncompiled

    def __getattr__(self, name):          # the wrapped executable's own (package_path, steps)
        return getattr(self.__dict__["executable"], name)

    def __call__(self, *leaves):
        try:
            return self.executable(*leaves)
        except ArgumentRangeError as e:
            if self.host is None:
                self.host = self._host_program()
                logging.warning("rlx_jax: '%s' runs on the host (the xla reference) for calls "
                                "whose integer arguments Core ML cannot hold: %s",
                                self.lowered.name, str(e).splitlines()[0])
            self.host_calls += 1
            outs = [np.asarray(o) for o in self.host(*leaves)]   # Core ML's own result form
            return self._convert(outs) if self._convert is not None else outs

    def _host_program(self):
        from ...base import get_backend
        from ....placement import place
        xla = get_backend("xla")
        placed = place(self.lowered.graph, xla, True, "host", {})
        return xla.lower(placed.graph, name=self.lowered.name)
