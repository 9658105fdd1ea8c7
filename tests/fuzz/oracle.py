"""The oracle: JAX's own `jax.jit` on CPU, compared with `rlx_jax.jit(fn, backend=b)`.

Outcomes: "match"; "refused" (the backend raised an `rlx_jax.errors.RlxError`: a clear refusal
is allowed, and counted); "mismatch" (shape, dtype or values differ); "crash" (any other
exception, a signal death of the worker process, or a timeout).

Values are compared elementwise: bool and int32 exactly; floats with NaN where JAX has NaN, the
same infinities, and finite values within `rtol * |want| + rtol * scale`, where `scale` is
max(1, the largest finite magnitude of any intermediate value of the program): rounding errors
are relative to the largest number that flowed into a result, not to the result itself, so a
cancellation to near zero compares on the right scale. `rtol` is the largest entry of this table
over the op families the program uses, in the lowest float precision it uses:

| family class                                         | float32 | float16 |
|------------------------------------------------------|---------|---------|
| exact: shape, index, compare/where, cast, sort        | 0       | 0       |
| arithmetic: unary, binary, scatter                   | 2e-6    | 2e-3    |
| transcendental: sin, exp, log, erf, pow, ...         | 1e-5    | 4e-3    |
| accumulating: reduce, cumulative, linalg (dot/einsum/matmul), conv | 3e-5 | 2e-2 |

Gradients (`jax.grad` programs) get 10x the table. Exact ops need no tolerance because the
generator only applies discrete ops (comparisons, floor, argmax, casts to int) to values that
are either exact or far from the decision boundary (generate.py).

The oracle has quirks of its own; a mismatch report is worth checking against eager JAX:
XLA's simplifier rewrites log(pow(x, c)) into c * log(|x|) (finite where x < 0), and XLA's CPU
tanh loses relative accuracy in 1 + tanh(z) for z < -3 (the tail of the tanh-approximated
gelu), so e.g. 1 / gelu(x) there differs from MLX and Core ML, which agree with each other.
"""
import dataclasses

import numpy as np

from .program import FLOATS

CLASS = {"shape": "exact", "index": "exact", "compare": "exact", "cast": "exact",
         "sort": "exact", "unary": "arith", "binary": "arith", "scatter": "arith",
         "transcendental": "transcendental", "reduce": "accumulate",
         "cumulative": "accumulate", "linalg": "accumulate", "conv": "accumulate"}
RTOL = {"float32": {"exact": 0.0, "arith": 2e-6, "transcendental": 1e-5, "accumulate": 3e-5},
        "float16": {"exact": 0.0, "arith": 2e-3, "transcendental": 4e-3, "accumulate": 2e-2}}
GRAD_FACTOR = 10.0


@dataclasses.dataclass
class Outcome:
    kind: str                   # match | refused | mismatch | crash
    detail: str = ""
    host: tuple = ()            # (kind, reason, claimed?) of each op that ran on the host

    def signature(self):
        """What identifies 'the same failure' while shrinking: kind and error type."""
        return (self.kind, self.detail.split(":")[0] if self.kind != "mismatch" else "")


def tolerance(prog, avals):
    tier = "float16" if any(d == "float16" for _, d in avals.values()) else "float32"
    classes = {CLASS[o.family] for o in prog.ops} or {"exact"}
    rtol = max(RTOL[tier][c] for c in classes)
    return rtol * (GRAD_FACTOR if prog.grad else 1.0)


def scale_of(arrays):
    s = 1.0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.name in FLOATS and a.size:
            fin = np.abs(a[np.isfinite(a)].astype(np.float64))
            if fin.size:
                s = max(s, float(fin.max()))
    return s


def compare(got, want, rtol, scale):
    """None when `got` matches `want` (lists of arrays), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} results, JAX gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"result {k}: shape {g.shape}, JAX gives {w.shape}"
        if g.dtype != w.dtype:
            return f"result {k}: dtype {g.dtype}, JAX gives {w.dtype}"
        if w.dtype.name not in FLOATS:
            bad = g != w
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            with np.errstate(invalid="ignore"):
                fin = np.isfinite(w64)
                close = np.abs(g64 - w64) <= rtol * np.abs(w64) + rtol * scale
                bad = np.where(fin, ~close, ~((np.isnan(w64) & np.isnan(g64)) | (g64 == w64)))
        if np.any(bad):
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            n = int(np.sum(bad))
            return (f"result {k} {w.dtype}{list(w.shape)}: {n} of {w.size} elements differ, "
                    f"e.g. at {i}: got {g[i]!r}, JAX gives {w[i]!r} (rtol {rtol:g}, scale "
                    f"{scale:g})")
    return None


def reference(prog, config=None, data=None):
    """(JAX's results as a list of arrays, scale, avals) of `prog`; raises generate.Reject when
    its values are ill-conditioned (see generate.py)."""
    import jax
    from .generate import Config, Reject, Val, _magnitude, evaluate_all
    config = config or Config()
    key = prog.to_json()
    if key in _CACHE:
        return _CACHE[key]
    data = evaluate_all(prog) if data is None else data
    values = list(data.values())
    for v in values:
        _magnitude(Val(None, str(v.dtype), False), v, config)
    if prog.grad:
        loss = data[prog.outputs[prog.grad["output"]]]
        if np.any(np.isnan(loss.astype(np.float64))):
            # the gradient of a NaN loss is NaN in eager JAX but jax.jit's simplifications
            # may turn parts of it into zeros: no reference to compare with
            raise Reject("NaN in the differentiated output")
        fn, _, args = prog.build()
        outs = [np.asarray(g) for g in jax.tree.leaves(jax.jit(fn)(*args))]
        for g in outs:
            _magnitude(Val(None, str(g.dtype), False), g, config)
        values += outs
    else:
        outs = [data[n] for n in prog.outputs]
    avals = {n: (tuple(v.shape), str(v.dtype)) for n, v in data.items()}
    result = (outs, scale_of(values), avals)
    while len(_CACHE) >= 4:         # the runner asks right after generating, once per backend
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = result
    return result


_CACHE = {}
