"""Host arrays (numpy, or numpy views of MLX memory) as jax.Arrays, the cheapest correct way.

`jax.device_put` of a 16-byte array costs 50-100 µs here (its Python layers: the device_put
primitive, sharding resolution, shard_args); the jaxlib entry point it ends in,
`batched_device_put`, costs about 5 µs. With ZERO_COPY host-buffer semantics, JAX's CPU client
aliases a buffer whose address is a multiple of 64 bytes (keeping the numpy array, and whatever
owns its memory, alive as long as the jax.Array) and copies any other buffer once; on a
non-CPU jax device the data is copied to the device. `from_numpy` gives each result the weak
type asked for (jax.jit's results carry the jaxpr's) in the same call.

Measured (jax 0.10.2, mlx 0.32.4, Linux x86-64): MLX's CPU allocator returns 8- or 16-byte
aligned buffers, so results made from MLX memory are one copy here; Metal buffers on Apple
silicon are page-aligned (MLX allocates them with `newBufferWithLength`), so there the same call
aliases them. `jax.dlpack.from_dlpack` of an `mx.array` is no cheaper (it copies unaligned
buffers too) and aborted the process at exit ("terminate called without an active exception"),
so DLPack is not used.

Where the jaxlib entry point is missing (another jax release), `jax.device_put` is used.
"""
from typing import Any

import jax
import numpy as np

from . import jax_internals

ALIGNMENT = 64          # bytes: JAX's CPU client aliases host buffers aligned to this
# jax.transfer_guard("disallow") refuses implicit transfers of the user's data; a program's
# results are not that (jax.jit's results need no transfer, and on Apple silicon these alias
# the backend's memory), so their jax.Arrays are made with host-to-device transfers allowed
GUARDED = "Disallowed host-to-device transfer"

_AVALS: dict[Any, Any] = {}     # (shape, dtype, weak type) -> ShapedArray, at most _AVALS_MAX
_AVALS_MAX = 4096
_SHARDINGS: dict[Any, Any] = {}     # device -> SingleDeviceSharding
_DEFAULT: list[Any] = []     # [the default device], read once


def _entry():
    client = jax_internals.module("xla_client")
    put = getattr(client, "batched_device_put", None)
    semantics = getattr(getattr(client, "HostBufferSemantics", None), "ZERO_COPY", None)
    return (put, semantics) if put is not None and semantics is not None else (None, None)


_PUT, _ZERO_COPY = _entry()
_CONFIG = jax_internals.module("config")
_SHAPED = jax_internals.module("core").ShapedArray


def _device():
    dev = _CONFIG.default_device.value          # jax.default_device(...) or its config option
    if dev is None:
        if not _DEFAULT:
            _DEFAULT.append(jax.devices()[0])
        return _DEFAULT[0]
    return jax.devices(dev)[0] if isinstance(dev, str) else dev


def _sharding(dev):
    sh = _SHARDINGS.get(dev)
    if sh is None:
        sh = _SHARDINGS[dev] = jax.sharding.SingleDeviceSharding(dev)
    return sh


def _aval(x, weak):
    key = (x.shape, x.dtype, weak)
    aval = _AVALS.get(key)
    if aval is None:
        if len(_AVALS) >= _AVALS_MAX:       # a process meeting ever new shapes stays bounded
            _AVALS.clear()
        aval = _AVALS[key] = _SHAPED(x.shape, x.dtype, weak_type=weak)
    return aval


def from_numpy(arrays, weak=()):
    """jax.Arrays (uncommitted, on the default device, as jax.device_put makes them) of numpy
    arrays, aliasing each one whose buffer is ALIGNMENT-aligned and copying the others once;
    result i is weakly typed where weak[i] is (missing entries: strongly typed). The arrays
    must not be written to afterwards (an MLX result's memory never is)."""
    return Converter(weak)(arrays)


class Converter:
    """from_numpy for the results of one program: their avals (shapes and dtypes fixed by the
    program) are made once and reused while the results match them. `gives_weak_types`: the
    results carry `weak` already (arguments.with_weak_types adds nothing)."""
    gives_weak_types = _PUT is not None

    def __init__(self, weak=()):
        self.weak, self._avals = tuple(weak), []

    def __call__(self, arrays):
        if _PUT is None:
            return jax.device_put(list(arrays))
        avals = self._avals
        if len(avals) != len(arrays):
            return self._remade(arrays)
        dev = _device()
        sh, devs = _sharding(dev), [dev]
        outs = []
        try:
            for a, x in zip(avals, arrays):
                if a.shape != x.shape or a.dtype != x.dtype:
                    return self._remade(arrays)
                outs.append(_PUT(a, sh, [x], devs, False, False, _ZERO_COPY))
        except RuntimeError as e:
            if GUARDED not in str(e):
                raise
            with jax.transfer_guard_host_to_device("allow"):    # see GUARDED
                return self(arrays)
        return outs

    def _remade(self, arrays):
        n, weak = len(self.weak), self.weak
        self._avals = [_aval(x, i < n and weak[i]) for i, x in enumerate(arrays)]
        return self(arrays)


def shares_memory(jax_array, host_array):
    """Whether a jax.Array on the CPU aliases `host_array`'s buffer (no copy was made)."""
    return jax_array.unsafe_buffer_pointer() == np.asarray(host_array).ctypes.data


def aligned(host_array):
    """Whether a numpy array's buffer is ALIGNMENT-aligned (from_numpy then aliases it on a
    CPU device)."""
    return host_array.ctypes.data % ALIGNMENT == 0
