"""MIL reference executor: runs a saved .mlpackage without Core ML.

The package is loaded back into a MIL program (coremltools' milproto loader) and evaluated op
by op: each op is re-issued on constant inputs inside a MIL function, so coremltools' own NumPy
`value_inference` computes it; ops it lacks or gets wrong have exact NumPy versions here
(OVERRIDES). This checks lowering semantics; it does not reproduce Core ML's float16 or Neural
Engine rounding.
"""
import itertools
import logging
import os

import numpy as np

from ...errors import LoweringError
from ...ir.interpret import rule_table
from .executor_control import BLOCK_OPS, live_ops

OVERRIDES, override = rule_table("MIL executor overrides")


def _np(var):
    from coremltools.converters.mil.mil import types
    return np.dtype(types.nptype_from_builtin(var.dtype))


class MilReferenceExecutor:
    """Callable: {input name: array} -> {output name: array}."""

    def __init__(self, package_path):
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load
        spec = ct.utils.load_spec(package_path)
        weights = os.path.join(package_path, "Data", "com.apple.CoreML", "weights")
        prog = load(spec, spec.specificationVersion, weights)
        func = prog.functions["main"]
        self.opset = func.opset_version
        self.ops = live_ops(func.operations, func.outputs)   # (executor_control.py)
        self.input_names = list(func.inputs)
        self.output_names = [v.name for v in func.outputs]

    def __call__(self, feeds):
        from coremltools.converters.mil.mil import Function
        env = dict(feeds)
        level = logging.getLogger("coremltools").level
        logging.getLogger("coremltools").setLevel(logging.ERROR)
        try:
            with Function({}, opset_version=self.opset), np.errstate(all="ignore"):
                for op in self.ops:
                    self._run(op, env)
        finally:
            logging.getLogger("coremltools").setLevel(level)
        return {n: env[n] for n in self.output_names}

    def _run(self, op, env):
        outs = op.outputs
        if op.op_type == "const":
            env[outs[0].name] = np.asarray(outs[0].val, dtype=_np(outs[0]))
            return

        def value(v):
            if v.name in env:
                return env[v.name]
            if v.val is not None:
                return v.val
            raise LoweringError(f"MIL executor: no value for {v.name} used by {op.op_type}")

        kwargs = {k: [value(x) for x in v] if isinstance(v, (list, tuple)) else value(v)
                  for k, v in op.inputs.items()}
        if op.op_type in BLOCK_OPS:           # cond / while_loop (executor_control.py)
            results = BLOCK_OPS[op.op_type](self, op, env)
        elif op.op_type in OVERRIDES:
            results = OVERRIDES[op.op_type](**kwargs)
        else:
            results = self._reissue(op, kwargs)
        results = results if isinstance(results, (list, tuple)) else (results,)
        for var, val in zip(outs, results):
            val = np.asarray(val).astype(_np(var), copy=False)
            if tuple(val.shape) != tuple(var.shape):
                val = val.reshape(var.shape)
            env[var.name] = val

    @staticmethod
    def _reissue(op, kwargs):
        from coremltools.converters.mil import Builder as mb
        spec = op.input_spec.input_types

        def const(v, param):
            a = np.asarray(v)
            if a.dtype.kind in "USO":
                return str(a.item())
            if a.ndim == 0 and param:   # compile-time params: scalars, Python bools for flags
                return a.item() if a.dtype == np.bool_ else a[()]
            return a
        consts = {}
        for k, v in kwargs.items():
            param = bool(getattr(spec.get(k), "const", False))
            consts[k] = [const(x, param) for x in v] if isinstance(v, list) else const(v, param)
        out = getattr(mb, op.op_type)(**consts)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        vals = [o.val for o in outs]
        if any(v is None for v in vals):
            raise LoweringError(
                f"MIL reference executor cannot evaluate MIL op {op.op_type!r} "
                f"(coremltools has no value inference for it); add an override in "
                f"rlx_jax/backends/coreml/executor.py")
        return vals


# ---- exact NumPy semantics for ops coremltools does not evaluate (or evaluates wrongly) ----

@override("gather_nd")
def _gather_nd(x, indices, batch_dims=0, **_):
    if int(batch_dims) != 0:
        raise LoweringError("MIL executor: gather_nd with batch_dims is not implemented")
    k = indices.shape[-1]
    return x[tuple(indices[..., i] for i in range(k))]


SCATTER_UFUNC = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "max": np.maximum, "min": np.minimum}


@override("scatter_nd")
def _scatter_nd(data, indices, updates, mode="add", **_):
    out = np.array(data, copy=True)
    k = indices.shape[-1]
    where = tuple(indices[..., i].reshape(-1) for i in range(k))
    upd = updates.reshape((-1,) + data.shape[k:])
    if str(mode) == "update":
        out[where] = upd
    else:
        SCATTER_UFUNC[str(mode)].at(out, where, upd)
    return out


@override("argsort")
def _argsort(x, axis=-1, ascending=False, **_):
    key = x if ascending else -x.astype(np.float64) if x.dtype.kind != "f" else -x
    return np.argsort(key, axis=int(axis), kind="stable").astype(np.int32)


@override("silu")
def _silu(x, **_):
    return x / (1 + np.exp(-x))


def _windows(xp, kernel, strides, dilations, out):
    """Yields (kernel offset, strided window view [N, C, *out]) over a padded input."""
    for k in itertools.product(*[range(n) for n in kernel]):
        sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                   for o, d, n, s in zip(k, dilations, out, strides))
        yield k, xp[(slice(None), slice(None)) + sl]


def _pads(pad_type, pad, nsp, spatial, kernel, strides, dilations):
    pad_type = str(pad_type)
    if pad_type == "custom":
        p = [int(v) for v in pad]
        return [(p[2 * i], p[2 * i + 1]) for i in range(nsp)]
    if pad_type == "valid":
        return [(0, 0)] * nsp
    if pad_type == "same":
        res = []
        for n, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
            res.append((total // 2, total - total // 2))
        return res
    raise LoweringError(f"MIL executor: pad_type {pad_type!r} is not implemented")


def _out_size(shape, pads, kernel, strides, dilations):
    return [(n + lo + hi - d * (k - 1) - 1) // s + 1
            for n, (lo, hi), k, s, d in zip(shape, pads, kernel, strides, dilations)]


@override("conv")
def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None,
          groups=1, **_):
    nsp = x.ndim - 2
    kernel = weight.shape[2:]
    strides = [int(s) for s in (strides if strides is not None else [1] * nsp)]
    dilations = [int(d) for d in (dilations if dilations is not None else [1] * nsp)]
    pads = _pads(pad_type, pad, nsp, x.shape[2:], kernel, strides, dilations)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + pads)
    out = _out_size(x.shape[2:], pads, kernel, strides, dilations)
    g, n, cout = int(groups), x.shape[0], weight.shape[0]
    w = weight.astype(np.float64).reshape((g, cout // g) + weight.shape[1:])
    y = np.zeros([n, g, cout // g] + out)
    for k, win in _windows(xp, kernel, strides, dilations, out):
        patch = win.reshape([n, g, -1] + out)
        y += np.einsum("ngc...,goc->ngo...", patch, w[(Ellipsis,) + k])
    y = y.reshape([n, cout] + out)
    if bias is not None:
        y += bias.reshape([1, cout] + [1] * nsp)
    return y.astype(x.dtype)


@override("max_pool")
def _max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False, **_):
    if bool(ceil_mode):
        raise LoweringError("MIL executor: max_pool with ceil_mode is not implemented")
    nsp = x.ndim - 2
    kernel = [int(k) for k in kernel_sizes]
    strides = [int(s) for s in (strides if strides is not None else [1] * nsp)]
    ones = [1] * nsp
    pads = _pads(pad_type, pad, nsp, x.shape[2:], kernel, strides, ones)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads, constant_values=-np.inf)
    out = _out_size(x.shape[2:], pads, kernel, strides, ones)
    acc = None
    for _, win in _windows(xp, kernel, strides, ones, out):
        acc = win if acc is None else np.maximum(acc, win)
    return acc
from . import executor_nn  # noqa: E402,F401  (NumPy versions of the nn kernels' MIL ops)


@override("select")
def _select(cond, a, b, **_):
    # coremltools' value_inference breaks when scalar branches broadcast against cond
    return np.where(cond, a, b)
