"""rlx_jax.export_coreml: trace, legalize and save a function as an .mlpackage."""
import inspect
import os

import jax

from ...errors import BadArgumentError


def _key_name(k):
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _input_names(fun, args, kwargs):
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]:
        top, idx, rest = path[0], path[1], path[2:]
        if _key_name(top) == "0":
            i = int(_key_name(idx))
            head = params[i] if i < len(params) else f"arg{i}"
        else:
            head = _key_name(idx)
        names.append("_".join([head] + [_key_name(k) for k in rest]))
    return names


def _output_names(out_tree):
    n = out_tree.num_leaves
    tree = jax.tree_util.tree_unflatten(out_tree, list(range(n)))
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    if n == 1 and not leaves[0][0]:
        return ["output"]
    return ["_".join(["output"] + [_key_name(k) for k in path]) for path, _ in leaves]


def export_coreml(fun, *args, path, **options):
    """Saves `fun` traced at `args` as a Core ML .mlpackage at `path` (returns the path).

    Model inputs/outputs are named after the argument / result pytree paths, e.g.
    `params_w`, `x`, `output`. Options are the Core ML backend's (compute_precision,
    minimum_deployment_target, optimize, ...); `static_argnums` marks static arguments.
    """
    from ...api import jit
    from .backend import CoremlBackend, write_package
    from .package import Options
    if not str(path).endswith(".mlpackage"):
        raise BadArgumentError(f"path must end in .mlpackage, got {path!r}")
    static = options.pop("static_argnums", ())
    options.pop("compute_units", None)
    jitted = jit(fun, backend="coreml", static_argnums=static)
    lowered = jitted.lower(*args)
    nums = {static} if isinstance(static, int) else set(static)
    dyn = tuple(a for i, a in enumerate(args) if i not in nums)
    opts = Options(input_names=options.pop("input_names", None) or _input_names(fun, dyn, {}),
                   output_names=options.pop("output_names", None)
                   or _output_names(lowered.out_tree),
                   source=options.pop("source", None) or getattr(fun, "__qualname__",
                                                                  repr(fun)),
                   **options)
    assert isinstance(lowered.backend, CoremlBackend)
    return write_package(lowered.legalized, opts, os.fspath(path), lowered.timings)
