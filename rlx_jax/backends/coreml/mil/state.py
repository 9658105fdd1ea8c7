"""Core ML state (iOS18): an argument and the result that replaces it, kept in the model between
calls instead of passed in and out (export_coreml(..., state={"keys": "output_1"}), model input
name -> model output name). The input becomes a state placeholder read once at the function's
entry (`read_state`); the result is written back (`coreml_update_state`) and is no model output.
Core ML holds float16 states only (coremltools refuses others), so the pair must be float16 in
the function: a JAX program keeping its cache in jnp.float16 computes what the model does."""
import numpy as np

from ....errors import BadArgumentError


def check(state, graph, in_names, out_names, opset):
    """{input index: output index} of `state` (model names), refusing what Core ML cannot keep;
    {} for no state."""
    if not state:
        return {}
    import coremltools as ct
    if opset.value < ct.target.iOS18.value:
        raise BadArgumentError(f"export_coreml: state= needs minimum_deployment_target='iOS18' "
                               f"or later (Core ML keeps state from iOS18 / macOS15); this "
                               f"export targets {opset.name}")
    if not isinstance(state, dict):
        raise BadArgumentError("export_coreml: state= is a dict {model input name: model "
                               "output name that replaces it}")
    pairs = {}
    for name, result in state.items():
        if name not in in_names:
            raise BadArgumentError(f"export_coreml: state names the input {name!r}; the "
                                   f"model's inputs are {in_names}")
        if result not in out_names:
            raise BadArgumentError(f"export_coreml: state pairs {name!r} with {result!r}; "
                                   f"the model's outputs are {out_names}")
        v, o = graph.inputs[in_names.index(name)], graph.outputs[out_names.index(result)]
        if (v.shape, v.dtype) != (o.shape, o.dtype):
            raise BadArgumentError(
                f"export_coreml: state {name!r} is {v.type_str()} but its new value "
                f"{result!r} is {o.type_str()}; a state keeps one shape and dtype")
        if v.dtype != np.float16:
            raise BadArgumentError(
                f"export_coreml: state {name!r} is {v.type_str()}; Core ML keeps float16 "
                f"states only: hold it in jnp.float16 in the function (cast to float32 "
                f"where it is used)")
        pairs[in_names.index(name)] = out_names.index(result)
    if len(set(pairs.values())) != len(pairs):
        raise BadArgumentError("export_coreml: two states name the same output")
    return pairs


def spec(mb, shape):
    """The placeholder of a float16 state of `shape`."""
    from coremltools.converters.mil.mil import types
    return mb.StateTensorSpec(shape=shape, dtype=types.fp16)
