"""Data-parallel programs over processes: JAX's collectives on MLX's distributed engine.

A function jitted with `rlx_jax.jit(fn, backend="mlx", axis_name="batch")` is traced with the
named axis "batch" bound to the processes of the group `initialize()` made (jax.make_jaxpr's
`axis_env`), so `lax.psum / pmean / pmax / pmin / all_gather / psum_scatter / axis_index /
ppermute` over "batch" become RLX collectives, which the MLX backend lowers onto
`mx.distributed` (all_sum, all_max, all_min, all_gather). Every process runs the same program
on its own shard of the data::

    group = rlx_jax.distributed.initialize()        # mx.distributed.init(); rank(), size()
    @rlx_jax.jit(backend="mlx", axis_name="batch")
    def step(params, batch):
        loss, g = jax.value_and_grad(loss_fn)(params, batch)
        g = jax.lax.pmean(g, "batch")
        return jax.tree.map(lambda p, d: p - 0.1 * d, params, g), loss
    params, loss = step(params, rlx_jax.distributed.shard(global_batch))

Launch it with MLX's launcher (the ring backend over TCP)::

    mlx.launch -n 4 --backend ring python train.py                 # 4 processes, this machine
    mlx.launch --hostfile hosts.json --backend ring python train.py    # processes on hosts

where hosts.json lists the machines, e.g. `[{"ssh": "mac1", "ips": ["10.0.0.1"]},
{"ssh": "mac2", "ips": ["10.0.0.2"]}]` (see `mlx.distributed_config` to write one).

Run without a launcher, `initialize()` gives a group of one process: the collectives then have
their single-process meaning on every backend (psum is the identity, axis_index is 0; Core ML
claims no collective, so there they run in a host segment on the xla reference). Groups of more
than one process run only on backend="mlx"; "xla" and "coreml" refuse them when compiling.

On MLX the collectives stay inside the one mx.compile'd program (no split around them). The
ranks of a launch build their compiled kernels into a cache directory each (mlx-rank<r> under
the cache root): a rank's first call holds its build lock while it waits for the others in a
collective. Two launches at once on one machine should use different RLX_JAX_CACHE_DIRs (rank r
of each would share mlx-rank<r>).
"""
import contextlib
import os
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import BadArgumentError, LoweringError

if TYPE_CHECKING:
    from mlx.core.distributed import Group

_STATE: dict[str, "Group | None"] = {"group": None}
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def initialize(backend: str = "any", strict: bool = False) -> "Group":
    """mx.distributed.init(strict, backend): the process group (ranks of this launch, or a
    group of one without a launcher); kept for every jit(axis_name=...) in this process."""
    import mlx.core as mx
    _STATE["group"] = made = mx.distributed.init(strict=strict, backend=backend)
    return made


def use(new_group: "Group | None") -> "Group | None":
    """Makes `new_group` (an mx.distributed.Group, e.g. a `group().split(color)`) the group of
    the programs compiled from now on; returns the previous one."""
    old, _STATE["group"] = _STATE["group"], new_group
    return old


def is_initialized() -> bool:
    return _STATE["group"] is not None


def group() -> "Group":
    """The group `initialize()` made; raises BadArgumentError before it."""
    made = _STATE["group"]
    if made is None:
        raise BadArgumentError(
            "the process group is not initialised: call rlx_jax.distributed.initialize() "
            "before running a function jitted with axis_name=")
    return made


def rank() -> int:
    return group().rank()


def size() -> int:
    return group().size()


def shard(global_batch: Any, axis: int = 0) -> Any:
    """This process's block of `global_batch` (a pytree of arrays), split along `axis` into
    size() equal blocks by rank (rank r takes block r)."""
    n, r = size(), rank()

    def take(x: Any) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[axis] % n:
            raise BadArgumentError(
                f"shard: dimension {axis} of size {x.shape[axis]} does not split into {n} "
                f"equal blocks (one per process)")
        block = x.shape[axis] // n
        return np.take(x, np.arange(r * block, (r + 1) * block), axis=axis)
    import jax
    return jax.tree_util.tree_map(take, global_batch)


def axis_env(axis_name: str | None) -> list[tuple[str, int]]:
    """jax.make_jaxpr's axis_env for a jit's axis_name ([] without one)."""
    if axis_name is None:
        return []
    return [(axis_name, size())]


def group_for(node: Any) -> "Group":
    """The group a collective node runs on: the initialised one, of the size it was traced
    for."""
    g = group()
    if g.size() != node.attrs["axis_size"]:
        raise LoweringError(
            f"{node.kind.name} over axis {node.attrs['axis_name']!r} was traced for "
            f"{node.attrs['axis_size']} processes, but the group has {g.size()}: trace and run "
            f"the program in the same launch")
    return g


def user_line(error: BaseException) -> str | None:
    """file:line of the last frame of `error`'s traceback outside jax and rlx_jax."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        f = frame.filename
        if not f.startswith(_PKG_DIR) and f"{os.sep}jax{os.sep}" not in f:
            return f"{os.path.basename(f)}:{frame.lineno} ({frame.name})"
    return None


@contextlib.contextmanager
def binding(fn_name: str, axis_name: str | None) -> Iterator[list[tuple[str, int]]]:
    """`with binding(fn_name, axis_name) as env:` traces with `env` as make_jaxpr's axis_env;
    a collective over an unbound axis name becomes a BadArgumentError naming the user's line."""
    env = axis_env(axis_name)
    try:
        yield env
    except NameError as error:
        if "axis name" not in str(error):
            raise
        where = user_line(error)
        bound = f"its axis_name is {axis_name!r}" if axis_name else "it has no axis_name"
        raise BadArgumentError(
            f"{fn_name}: {str(error).split('. ')[0]}" + (f" at {where}" if where else "")
            + f"; {bound}. Collectives run over the one axis named by rlx_jax.jit(..., "
              f"axis_name=...), which spans the processes of "
              f"rlx_jax.distributed.initialize()") from None
