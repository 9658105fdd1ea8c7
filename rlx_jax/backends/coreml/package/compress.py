"""Compressed weights for exported packages (export_coreml(..., weights=...)), applied after
conversion with coremltools' own optimize API (coremltools.optimize.coreml), on the model's
constant weights (a function's closed-over parameters; arguments stay model inputs):

  "int8"       linear_quantize_weights, symmetric int8, per output channel (iOS16+)
  "int4"       linear_quantize_weights, symmetric int4, per block of 32 (iOS18+)
  "palette<n>" palettize_weights, a uniform lookup table of 2**n entries per tensor (n in 1, 2,
               3, 4, 6, 8; iOS16+); coremltools' k-means tables need scikit-learn, which rlx_jax
               does not install: pass an OptimizationConfig for them
  a `coremltools.optimize.coreml.OptimizationConfig`: applied as it is (quantizer or
               palettizer by its op configs)

Weights under coremltools' threshold (2,048 elements) stay float. The report (the bytes of the
weight file before and after; the largest difference of every output from the float export's
on the export's example arguments, both run by the MIL executor) is kept in the package's
metadata ("rlx_jax.compression", JSON) and read back by `report(path)`; a multifunction
package keeps one report per function.
"""
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ....errors import BadArgumentError

MODES = ("int8", "int4") + tuple(f"palette{n}" for n in (1, 2, 3, 4, 6, 8))
_IOS18 = {"int4": "per-block int4 quantization"}


def config(weights: Any, target: Any) -> tuple[Callable[..., Any], Any]:
    """(the coremltools optimize function, its OptimizationConfig) for `weights`."""
    from coremltools.optimize.coreml import (OpLinearQuantizerConfig, OpPalettizerConfig,
                                             OptimizationConfig, linear_quantize_weights,
                                             palettize_weights)
    if isinstance(weights, OptimizationConfig):
        ops = [c for c in [weights.global_config, *weights.op_type_configs.values(),
                           *weights.op_name_configs.values()] if c is not None]
        palette = any(isinstance(c, OpPalettizerConfig) for c in ops)
        return (palettize_weights if palette else linear_quantize_weights), weights
    if weights not in MODES:
        raise BadArgumentError(f"weights={weights!r}: one of {list(MODES)}, or a coremltools."
                               f"optimize.coreml.OptimizationConfig")
    import coremltools as ct
    if weights in _IOS18 and target.value < ct.target.iOS18.value:
        raise BadArgumentError(
            f"weights={weights!r}: {_IOS18[weights]} needs Core ML's iOS18 ops; export with "
            f"minimum_deployment_target='iOS18' (this export targets {target.name}), or use "
            f"weights='int8' or 'palette4'")
    if weights == "int8":
        op = OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8",
                                     granularity="per_channel")
        return linear_quantize_weights, OptimizationConfig(global_config=op)
    if weights == "int4":
        op = OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int4",
                                     granularity="per_block", block_size=32)
        return linear_quantize_weights, OptimizationConfig(global_config=op)
    op = OpPalettizerConfig(mode="uniform", nbits=int(weights[len("palette"):]))
    return palettize_weights, OptimizationConfig(global_config=op)


def weight_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of a package's weight file (what compression changes; 0 when it has none)."""
    blob = os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin")
    return os.path.getsize(blob) if os.path.exists(blob) else 0


def compress(float_path: str, path: str, weights: Any, target: Any,
             feeds: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Writes the compressed package of the saved `float_path` at `path`; returns the report
    ({"weights", "bytes_float", "bytes", "ratio", "max_abs_error", "max_rel_error"}: per
    output, the relative one over the float output's largest magnitude; None without example
    `feeds`)."""
    import coremltools as ct
    from . import save
    from ..executor.reference import MilReferenceExecutor
    fn, cfg = config(weights, target)
    model = ct.models.MLModel(float_path, skip_model_load=True)
    small = fn(model, cfg)
    save(small, path)
    report: dict[str, Any] = {"weights": weights if isinstance(weights, str) else repr(weights),
              "bytes_float": weight_bytes(float_path), "bytes": weight_bytes(path)}
    report["ratio"] = round(report["bytes"] / max(report["bytes_float"], 1), 4)
    report["max_abs_error"] = None
    if feeds is not None:
        want, got = _run(MilReferenceExecutor(float_path), feeds), \
            _run(MilReferenceExecutor(path), feeds)
        diff = {k: np.abs(np.asarray(got[k], np.float64) - np.asarray(want[k], np.float64))
                for k in want}
        report["max_abs_error"] = {k: float(np.max(d, initial=0.0)) for k, d in diff.items()}
        report["max_rel_error"] = {  # of the output's largest magnitude
            k: float(np.max(d, initial=0.0) / max(np.max(np.abs(want[k]), initial=0.0), 1e-30))
            for k, d in diff.items()}
    small.user_defined_metadata["rlx_jax.compression"] = json.dumps(report)
    save(small, path)
    return report


def _run(executor: Any, feeds: Mapping[str, Any]) -> Any:
    """The executor's outputs on `feeds` (a stateful model's states start from their values
    among the feeds, as the example arguments give them)."""
    state = executor.make_state()
    for name in state:
        state[name][...] = feeds[name]
    return executor({n: feeds[n] for n in executor.input_names}, state=state)


def report(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The compression report kept in a package exported with `weights=`, or None."""
    import coremltools as ct
    meta = ct.utils.load_spec(path).description.metadata.userDefined
    text = meta.get("rlx_jax.compression")
    return json.loads(text) if text else None
