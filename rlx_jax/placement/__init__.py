"""Where each op of a program runs, and the executable of a program that runs in segments.

- `partition.py`: a legalized graph cut into device and host segments (fewest segments, then
  fewest bytes crossing).
- `plan.py`: `place` (legalize for a backend, ask it what it cannot run, partition) and the
  `Placement` report; the refusal naming every host node under `fallback="error"`.
- `executable.py`: `PartitionedExecutable`, the segments run in order, values converted once
  between the backends' array forms.
- `probe.py`: `supports(backend, graph)`, what a backend would run on the device.

What a backend cannot run, and how its arrays convert, it says through the hooks of
`backends.base.Backend` (`host_reasons`, `value_bounds`, `host_array`, `array_input`, ...).
"""
from .partition import DEVICE, FREE, HOST, Segment, partition, value_reasons
from .plan import Placement, host_nodes, place, plan, raise_host, warn_once
from .probe import Support, supports

__all__ = ["DEVICE", "FREE", "HOST", "Placement", "Segment", "Support", "host_nodes",
           "partition", "place", "plan", "raise_host", "supports", "value_reasons",
           "warn_once"]
