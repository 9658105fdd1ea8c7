"""Checks for users' tests: `check_grads` (gradients against jax.grad and finite differences),
`recorded_programs` and `assert_ran_on_device` (where a compiled program runs)."""
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from . import stages
from .api import jit
from .backends.base import Executable

# per dtype: (atol, rtol) against jax.grad, finite-difference step, (atol, rtol) against FD
_DEFAULTS = {
    "float64": ((1e-9, 1e-7), 1e-5, (1e-7, 1e-5)),
    "float32": ((1e-5, 1e-4), 1e-2, (1e-3, 2e-2)),
    "float16": ((1e-2, 2e-2), 1e-1, (1e-1, 1e-1)),
    "bfloat16": ((2e-2, 5e-2), 1e-1, (2e-1, 2e-1)),
}


def _float(x: ArrayLike) -> bool:
    return bool(jnp.issubdtype(jnp.result_type(x), jnp.floating))


def check_grads(f: Callable[..., Any], args: Sequence[Any], *, backend: str, order: int = 1,
                eps: float | None = None, atol: float | None = None, rtol: float | None = None,
                directions: int = 2, seed: int = 0) -> None:
    """Checks that gradients of `f` computed through `rlx_jax.jit(..., backend=backend)` are right.

    `f(*args)` is a JAX function of a tuple of pytrees; every floating-point leaf of `args` is
    differentiated, integer leaves (token ids, labels) are held fixed. A non-scalar result is
    reduced to a scalar by a fixed random projection. Three comparisons:

    1. `rlx_jax.jit(jax.grad(f), backend=backend)` against plain `jax.grad(f)`, leaf by leaf,
       `|got - want| <= atol + rtol * |want|`;
    2. the rlx gradient along `directions` random unit directions v against central finite
       differences of `f` (plain JAX) with step `eps`: `(f(x + eps v) - f(x - eps v)) / 2 eps`;
    3. with `order=2`, the same two checks for the gradient of `<grad f(x), v>` (a Hessian-vector
       product) computed through rlx_jax.

    Defaults depend on the leaves' dtype (float64: eps 1e-5, float32: eps 1e-2; run float64
    checks with `jax.config.update("jax_enable_x64", True)`). `atol`/`rtol`, when given, apply to
    both comparisons. Raises AssertionError naming the argument path (e.g. `args[0]['w']`), the
    check and the max error; returns None when every check passes.
    """
    args = tuple(args)
    with_paths, tree = jax.tree_util.tree_flatten_with_path(args)
    leaves = [jnp.asarray(x) for _, x in with_paths]
    names = ["args" + jax.tree_util.keystr(p) for p, _ in with_paths]
    diff = [i for i, x in enumerate(leaves) if _float(x)]
    if not diff:
        raise ValueError("check_grads: no floating-point argument leaves to differentiate")
    dtype = np.dtype(jnp.result_type(*[leaves[i] for i in diff])).name
    (g_atol, g_rtol), d_eps, (fd_atol, fd_rtol) = _DEFAULTS.get(dtype, _DEFAULTS["float32"])
    eps = d_eps if eps is None else eps
    g_atol, fd_atol = (g_atol, fd_atol) if atol is None else (atol, atol)
    g_rtol, fd_rtol = (g_rtol, fd_rtol) if rtol is None else (rtol, rtol)
    rng = np.random.RandomState(seed)

    out = jax.eval_shape(f, *args)
    proj = None
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != ():
        proj = jax.tree.map(lambda s: jnp.asarray(rng.randn(*s.shape), s.dtype), out)

    def scalar(*all_leaves: jax.Array) -> Any:
        y = f(*jax.tree_util.tree_unflatten(tree, all_leaves))
        if proj is None:
            return y
        return sum(jnp.sum(a * b) for a, b in zip(jax.tree.leaves(y), jax.tree.leaves(proj)))

    def unit_direction() -> list[jax.Array]:
        v = [rng.randn(*leaves[i].shape) for i in diff]
        norm = np.sqrt(sum(float(np.sum(x * x)) for x in v)) or 1.0
        return [jnp.asarray(x / norm, leaves[i].dtype) for x, i in zip(v, diff)]

    def shifted(vals: Sequence[jax.Array], v: Sequence[jax.Array], s: float) -> list[jax.Array]:
        out = list(vals)
        for i, d in zip(diff, v):
            out[i] = (vals[i] + s * d).astype(vals[i].dtype)
        return out

    def check(label: str, fn: Callable[..., Any], vals: Sequence[jax.Array]) -> None:
        grad = jax.grad(fn, argnums=tuple(diff))
        got = jit(grad, backend=backend)(*vals)
        want = jax.jit(grad)(*vals)
        for i, g, w in zip(diff, got, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            if g.shape != w.shape:
                raise AssertionError(f"check_grads[{backend}] {label}: gradient of {names[i]} "
                                     f"has shape {g.shape}, jax.grad gives {w.shape}")
            err = np.abs(g - w)
            bad = err > g_atol + g_rtol * np.abs(w)
            if bad.any() or not np.isfinite(g).all():
                raise AssertionError(
                    f"check_grads[{backend}] {label}: gradient of {names[i]} differs from "
                    f"jax.grad: max abs error {np.nanmax(err):.3g} (atol={g_atol}, rtol={g_rtol}) "
                    f"at {np.unravel_index(np.nanargmax(err), err.shape) if err.ndim else ()}")
        norm = np.sqrt(sum(float(np.sum(np.asarray(g, np.float64) ** 2)) for g in got))
        value = jax.jit(fn)
        for k in range(directions):
            v = unit_direction()
            dd = sum(float(np.sum(np.asarray(g, np.float64) * np.asarray(d, np.float64)))
                     for g, d in zip(got, v))
            fd = (float(value(*shifted(vals, v, eps))) - float(value(*shifted(vals, v, -eps)))) \
                / (2 * eps)
            tol = fd_atol + fd_rtol * max(norm, abs(fd))
            if not abs(dd - fd) <= tol:
                raise AssertionError(
                    f"check_grads[{backend}] {label}: directional derivative along random "
                    f"direction #{k} over {', '.join(names[i] for i in diff)} is {dd:.6g}, "
                    f"central finite differences (eps={eps}) give {fd:.6g}: error "
                    f"{abs(dd - fd):.3g} > tolerance {tol:.3g}")

    check("order 1", scalar, leaves)
    if order >= 2:
        v = unit_direction()

        def hvp_proj(*vals: jax.Array) -> Any:
            g = jax.grad(scalar, argnums=tuple(diff))(*vals)
            return sum(jnp.sum(a * b) for a, b in zip(g, v))
        check("order 2 (grad of <grad f, v>)", hvp_proj, leaves)


@contextlib.contextmanager
def recorded_programs() -> Iterator[list[stages.Compiled]]:
    """Collects every `Compiled` that rlx_jax builds while the block runs (every thread), in
    order: `with recorded_programs() as programs: ...`, then check `programs`."""
    got: list[stages.Compiled] = []
    stages.RECORDERS.append(got)
    try:
        yield got
    finally:
        stages.RECORDERS.remove(got)


def where_ran(compiled: stages.Compiled) -> str:
    """A Compiled's placement in a line: the backend, its runtime, the ops folded at compile
    time (placement/fold.py) and the host ops (kind, source line, reason), e.g. "mlx
    (mlx-compiled), every op on the device"."""
    placement = compiled.lowered.placement()
    head = f"{placement.backend.name} ({compiled.runtime})"
    if placement.folded:
        head += f", {len(placement.folded)} op(s) reading no argument folded at compile time"
    ops = placement.host_ops()
    if not ops:
        return head + ", every op on the device"
    shown = "; ".join(f"{n.kind.name}{' at ' + n.src if n.src else ''}: {why}"
                      for n, why in ops[:6])
    return head + f", {len(ops)} op(s) on the host: {shown}" + ("; ..." if len(ops) > 6 else "")


def ran_on_host(compiled: stages.Compiled) -> bool:
    """Whether some of `compiled` ran on the host: host segments, or Core ML calls whose integer
    arguments it cannot hold (runtime "+host-for-range")."""
    return (not compiled.lowered.placement().device_only or
            compiled.runtime.endswith("+host-for-range"))


def assert_ran_on_device(compiled: stages.Compiled, host: bool = False,
                         eager: bool = False) -> None:
    """Asserts where `compiled` ran: every op on the device unless `host` (then some op must be
    on the host), and on MLX through mx.compile unless `eager` (or compile=False was asked)."""
    if bool(host) != ran_on_host(compiled):
        raise AssertionError(f"expected {'host ops' if host else 'every op on the device'}; "
                             f"'{compiled.lowered.name}' ran on {where_ran(compiled)}")
    exe = compiled.executable
    asked_eager = compiled.lowered.options.get("compile", True) is False
    if compiled.runtime.startswith("mlx-eager") and not (eager or asked_eager):
        why = exe.why_uncompiled if isinstance(exe, Executable) else None
        raise AssertionError(f"'{compiled.lowered.name}' ran eagerly on MLX, not through "
                             f"mx.compile" + (f": {why}" if why else ""))
