"""Options of `rlx_jax.jit`, checked when `jit` is called, the same way for every backend.

Common options (every backend): `output` (what results are: "jax" arrays, the default,
"numpy" arrays, or the backend's "native" arrays), `native_backward`, `recognize` (True, the
default: formulas of jax.nn / flax / optax and their gradients become RLX's high-level and
backward kinds, passes/recognize.py; False: the traced graph is legalized as it is), and
`fallback` ("host", the default: what the backend cannot run runs on the host in reported
segments; "error": refuse the program, naming every such op), `fold_constants` (True, the
default: what reads no argument is evaluated once at compile time by JAX on the CPU,
placement/fold.py; False: it runs on the device every call), and `axis_name` (a str: the
named axis of JAX's collectives, bound to the processes of rlx_jax.distributed, see
distributed.py). Each backend adds its own names
(`Backend.options`) and may check their values (`Backend.check_options`, which raises
`BadArgumentError`). With `backend="auto"` only the common options are accepted: a
backend's own option says which backend it is meant for, so name that backend.

jax.jit's keywords: `static_argnums` / `static_argnames` (jit's own arguments), `donate_argnums`,
`donate_argnames`, `keep_unused` and `inline` are accepted on every backend and change nothing:
no backend aliases a donated buffer (MLX and Core ML executables allocate their results; the
arguments are left intact, as jax.jit leaves them where it cannot donate), every argument stays
an input of the program, and an rlx_jax.jit function called inside another rlx_jax.jit trace is
always inlined. `abstracted_axes`, `in_shardings`, `out_shardings` and `device` are refused with
what to do instead; so is a JAX platform name (`backend="cpu"`) as the backend.
"""
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import BadArgumentError

if TYPE_CHECKING:
    from .backends.base import Backend


def _ints(v: object) -> bool:
    return isinstance(v, int) or (isinstance(v, (tuple, list)) and all(isinstance(i, int)
                                                                      for i in v))


def _names(v: object) -> bool:
    return isinstance(v, str) or (isinstance(v, (tuple, list)) and all(isinstance(i, str)
                                                                      for i in v))


OUTPUTS = ("jax", "numpy", "native")
FALLBACKS = ("host", "error")
COMMON: dict[str, Callable[[Any], bool]] = {
    "output": lambda v: v in OUTPUTS,
    "native_backward": lambda v: isinstance(v, bool),
    "fallback": lambda v: v in FALLBACKS,
    "recognize": lambda v: isinstance(v, bool),
    "fold_constants": lambda v: isinstance(v, bool),
    "donate_argnums": _ints,
    "donate_argnames": _names,
    "keep_unused": lambda v: isinstance(v, bool),
    "inline": lambda v: isinstance(v, bool),
    "axis_name": lambda v: v is None or isinstance(v, str),
    "polymorphic_shapes": lambda v: v is None or isinstance(v, str) or (
        isinstance(v, (tuple, list)) and all(i is None or isinstance(i, str) for i in v)),
    "polymorphic_constraints": _names,
}
COMMON_DOC = {"output": f"one of {list(OUTPUTS)}", "native_backward": "True or False",
              "fallback": f"one of {list(FALLBACKS)}", "recognize": "True or False",
              "fold_constants": "True or False",
              "donate_argnums": "an int or a tuple of ints",
              "donate_argnames": "a str or a tuple of strs",
              "keep_unused": "True or False", "inline": "True or False",
              "axis_name": "None or one axis name (a str): the named axis spanning the "
                           "processes of rlx_jax.distributed.initialize()",
              "polymorphic_shapes": "None, a shape string such as 'b, t, 16' for every "
                                    "argument, or one string (or None) per positional argument",
              "polymorphic_constraints": "a str or a tuple of strs such as 't <= 512'"}
JIT_KEYWORDS = ("backend", "static_argnums", "static_argnames")
DEFAULT_OUTPUT = "jax"
JAX_PLATFORMS = ("cpu", "gpu", "tpu", "cuda", "rocm", "metal")
JAX_ONLY = {
    "abstracted_axes": "shapes are static in rlx_jax: a new shape compiles a new program "
                       "(jax.jit's abstracted_axes is experimental there too); drop it",
    "in_shardings": "rlx_jax runs each program whole on one device; drop the shardings "
                    "(use jax.jit for sharded programs)",
    "out_shardings": "rlx_jax runs each program whole on one device; drop the shardings "
                     "(use jax.jit for sharded programs)",
    "device": "the device is the backend's (MLX's default device, Core ML's compute units, "
              "the xla reference's JAX default device: use jax.default_device(...) or "
              "JAX_PLATFORMS for it); drop device=",
}


def check_backend(backend: object, backends: Mapping[str, "Backend"]) -> None:
    """Raises BadArgumentError unless `backend` names an rlx_jax backend or "auto"."""
    choices = sorted(backends) + ["auto"]
    if not isinstance(backend, str):
        raise BadArgumentError(f"backend must be a string, one of {choices}; got {backend!r}")
    if backend.lower() in JAX_PLATFORMS and backend not in backends:
        raise BadArgumentError(
            f"rlx_jax.jit(backend={backend!r}): {backend!r} is a JAX/XLA platform (jax.jit's "
            f"backend=); rlx_jax.jit's backend picks the program's backend, one of {choices}. "
            f"For JAX's own XLA use backend='xla' and choose its platform with JAX_PLATFORMS "
            f"or jax.default_device")
    if backend != "auto" and backend not in backends:
        raise BadArgumentError(f"unknown backend {backend!r}; choose one of {choices}")


def _accepted(backend_name: str, backends: Mapping[str, "Backend"]) -> str:
    own = ({n: sorted(b.options) for n, b in sorted(backends.items()) if b.options}
           if backend_name == "auto" else {backend_name: sorted(backends[backend_name].options)})
    per = "; ".join(f"{n}: {v}" for n, v in own.items()) or "none"
    return (f"accepted: jax.jit's {list(JIT_KEYWORDS)}, every backend's {sorted(COMMON)}, and "
            f"the backends' own ({per})")


def check_options(backend_name: str, options: Mapping[str, Any],
                  backends: Mapping[str, "Backend"]) -> None:
    """Raises BadArgumentError for an unknown option or value; returns None."""
    where = f"rlx_jax.jit(backend={backend_name!r})"
    for name in sorted(set(options) & set(JAX_ONLY)):
        raise BadArgumentError(f"{where}: {name}= is a jax.jit keyword rlx_jax does not take: "
                               f"{JAX_ONLY[name]}")
    for name in sorted(set(options) & set(COMMON)):
        if not COMMON[name](options[name]):
            raise BadArgumentError(f"rlx_jax.jit: {name}={options[name]!r}; it must be "
                                   f"{COMMON_DOC[name]}")
    own = {k: v for k, v in options.items() if k not in COMMON}
    known = set().union(*(b.options for b in backends.values()))
    unknown = sorted(set(own) - known)
    if unknown:
        raise BadArgumentError(f"{where}: unknown option(s) {unknown}; "
                               f"{_accepted(backend_name, backends)}")
    if backend_name == "auto":
        if own:
            owners = {k: sorted(n for n, b in backends.items() if k in b.options) for k in own}
            raise BadArgumentError(
                f"rlx_jax.jit(backend='auto'): option(s) {_named(owners)} belong to a backend; "
                f"name it (backend=...) to use them. Options every backend accepts: "
                f"{sorted(COMMON)}")
        return
    backend = backends[backend_name]
    unknown = sorted(set(own) - set(backend.options))
    if unknown:
        raise BadArgumentError(
            f"{where}: option(s) {unknown} belong to another backend; "
            f"{_accepted(backend_name, backends)}")
    try:
        backend.check_options(own)
    except BadArgumentError as e:
        raise BadArgumentError(f"rlx_jax.jit(backend={backend_name!r}): {e}") from None


def _named(owners: Mapping[str, list[str]]) -> str:
    return ", ".join(f"{k!r} ({'/'.join(v) if v else 'no backend'})" for k, v in owners.items())
