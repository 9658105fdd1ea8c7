"""MIL reference executor: runs a saved .mlpackage without Core ML.

The package is loaded back into a MIL program (coremltools' milproto loader) and evaluated op
by op: each op is re-issued on constant inputs inside a MIL function, so coremltools' own NumPy
`value_inference` computes it; ops it lacks or gets wrong have exact NumPy versions (OVERRIDES:
executor/ops.py and executor/nn.py). This checks lowering semantics, not Core ML's speed.

float16 as Core ML computes it: every op computes in the dtype the program gives it. coremltools'
float16 compute precision (its FP16ComputePrecision pass) types nearly every op float16 and casts
at the float32 inputs and outputs; each op here takes its float16 operands exactly as float32,
computes, and its result is rounded to float16 (above 65,504: inf), and the next op computes from
those values, as a float16 kernel with float32 arithmetic does. The few ops coremltools keeps in
float32 (casts, cond / while_loop carries, ops with a float32 constant beyond float16's range) stay
float32, as Core ML's typed execution runs them. The order of a device's sums is not reproduced.
"""
import logging
import os

import numpy as np

from ....errors import BadArgumentError, LoweringError
from . import nn as executor_nn  # noqa: F401  (NumPy versions of the nn kernels' MIL ops)
from . import strict as executor_strict  # noqa: F401  (the ops whose spec leaves a choice open)
from . import recurrent as executor_recurrent  # noqa: F401  (lstm)
from .ops import OVERRIDES
from .control import BLOCK_OPS, live_ops
from .flexible import allowed_shapes, any_symbolic, bind_sizes, check_feed


STATE_OPS = ("read_state", "coreml_update_state")    # (the executor holds the state)


def _np(var):
    from coremltools.converters.mil.mil import types
    return np.dtype(types.nptype_from_builtin(var.dtype))


def _widened(v):
    """A float16 operand as float32 (exact): an op computes from its float16 operands in float32,
    and `_run` rounds its float16 result once, so no op rounds (or overflows) between its own
    internal steps, e.g. the x**2 of a variance or the exp of a silu."""
    if isinstance(v, list):
        return [_widened(x) for x in v]
    return np.asarray(v, np.float32) if getattr(v, "dtype", None) == np.float16 else v


class MilReferenceExecutor:
    """Callable: {input name: array} -> {output name: array}."""

    def __init__(self, package_path, function_name=None):
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load
        spec = ct.utils.load_spec(package_path)
        weights = os.path.join(package_path, "Data", "com.apple.CoreML", "weights")
        prog = load(spec, spec.specificationVersion, weights)
        described = {f.name: f for f in spec.description.functions}   # a multifunction one
        name = function_name or spec.description.defaultFunctionName or "main"
        if name not in prog.functions:
            raise BadArgumentError(f"the package has no function {name!r}; its functions "
                                   f"are {sorted(prog.functions)}")
        func = prog.functions[name]
        self.function_name = name
        self.opset = func.opset_version
        self.ops = live_ops(func.operations, func.outputs)   # (executor/control.py)
        self.input_names = list(func.inputs)
        self.output_names = [v.name for v in func.outputs]
        inputs = described[name].input if name in described else spec.description.input
        self.allowed = {f.name: allowed_shapes(f) for f in inputs}
        states = described[name].state if name in described else spec.description.state
        self.state_types = {f.name: tuple(f.type.stateType.arrayType.shape) for f in states}
        self.all_input_names = self.input_names          # states among them
        self.input_names = [n for n in self.input_names if n not in self.state_types]

    def make_state(self):
        """A new state for calls of this model (Core ML's `make_state()`): each float16 state
        buffer holds NaN until the program writes it, the strictest reading of a state nothing
        has written yet (a program reading it gets NaN, not a convenient zero). Functions of one
        multifunction package share a state by name: pass the same dict to each."""
        return {n: np.full(shape, np.nan, np.float16) for n, shape in self.state_types.items()}

    def __call__(self, feeds, state=None):
        from coremltools.converters.mil.mil import Function
        if self.state_types and state is None:
            raise BadArgumentError(f"this model keeps state {sorted(self.state_types)}: call it "
                                   f"with state=executor.make_state() (Core ML's "
                                   f"predict(..., state=...))")
        for name, value in feeds.items():
            check_feed(name, np.shape(value), self.allowed.get(name))
        env = dict(feeds)
        self._state = state
        self._sizes = {}          # a flexible program's symbols -> their sizes in this call
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

        kwargs = {} if op.op_type in STATE_OPS else {
            k: _widened([value(x) for x in v] if isinstance(v, (list, tuple)) else value(v))
            for k, v in op.inputs.items()}
        if op.op_type in STATE_OPS:
            results = self._state_op(op, env)
        elif op.op_type in BLOCK_OPS:           # cond / while_loop (executor/control.py)
            results = BLOCK_OPS[op.op_type](self, op, env)
        elif op.op_type in OVERRIDES:
            results = OVERRIDES[op.op_type](**kwargs)
        elif op.op_type.startswith("constexpr_"):
            # compressed weights (coremltools.optimize: quantized, palettized, sparse): their
            # dense value, as coremltools' decompression defines it for the spec's ops
            results = op.materialized_val_inference()
        else:
            results = self._reissue(op, kwargs)
        results = results if isinstance(results, (list, tuple)) else (results,)
        for var, val in zip(outs, results):
            val = np.asarray(val).astype(_np(var), copy=False)
            if any_symbolic(var.shape):
                bind_sizes(self._sizes, op, var, val.shape)
            elif tuple(val.shape) != tuple(var.shape):
                val = val.reshape(var.shape)
            env[var.name] = val

    def _state_op(self, op, env):
        """read_state: a copy of the state's buffer; coreml_update_state: the value written
        into it (float16, the state's type) and returned."""
        if op.op_type == "read_state":
            return np.array(self._state[op.inputs["input"].name], copy=True)
        name, var = op.inputs["state"].name, op.inputs["value"]
        value = np.asarray(env[var.name] if var.name in env else var.val)
        if value.shape != self._state[name].shape or value.dtype != np.float16:
            raise LoweringError(f"MIL executor: coreml_update_state of {name} with "
                                f"{value.dtype}{list(value.shape)}; the state is float16"
                                f"{list(self._state[name].shape)}")
        self._state[name][...] = value
        return value

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
                f"rlx_jax/backends/coreml/executor/ops.py")
        return vals
