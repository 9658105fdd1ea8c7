"""Options of `rlx_jax.jit`, checked when `jit` is called, the same way for every backend.

Common options (every backend): `output` (what results are: "jax" arrays, the default,
"numpy" arrays, or the backend's "native" arrays), `native_backward`, `recognize` (True, the
default: formulas of jax.nn / flax / optax and their gradients become RLX's high-level and
backward kinds, passes/recognize.py; False: the traced graph is legalized as it is), and
`fallback` ("host", the default: what the backend cannot run runs on the host in reported
segments; "error": refuse the program, naming every such op). Each backend adds its own names
(`Backend.options`) and may check their values (`Backend.check_options`, which raises
`BadArgumentError`). With `backend="auto"` only the common options are accepted: a
backend's own option says which backend it is meant for, so name that backend.
"""
from .errors import BadArgumentError

OUTPUTS = ("jax", "numpy", "native")
FALLBACKS = ("host", "error")
COMMON = {
    "output": lambda v: v in OUTPUTS,
    "native_backward": lambda v: isinstance(v, bool),
    "fallback": lambda v: v in FALLBACKS,
    "recognize": lambda v: isinstance(v, bool),
}
COMMON_DOC = {"output": f"one of {list(OUTPUTS)}", "native_backward": "True or False",
              "fallback": f"one of {list(FALLBACKS)}", "recognize": "True or False"}
DEFAULT_OUTPUT = "jax"


def check_options(backend_name, options, backends):
    """Raises BadArgumentError for an unknown option or value; returns None."""
    for name in sorted(set(options) & set(COMMON)):
        if not COMMON[name](options[name]):
            raise BadArgumentError(f"rlx_jax.jit: {name}={options[name]!r}; it must be "
                                   f"{COMMON_DOC[name]}")
    own = {k: v for k, v in options.items() if k not in COMMON}
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
            f"rlx_jax.jit(backend={backend_name!r}): unknown option(s) {unknown}; accepted: "
            f"{sorted(COMMON)} and, for this backend, {sorted(backend.options) or 'none'}")
    check = getattr(backend, "check_options", None)
    if check is not None:
        try:
            check(own)
        except BadArgumentError as e:
            raise BadArgumentError(f"rlx_jax.jit(backend={backend_name!r}): {e}") from None


def _named(owners):
    return ", ".join(f"{k!r} ({'/'.join(v) if v else 'no backend'})" for k, v in owners.items())
