"""Multifunction packages (export_coreml({"prefill": (f, args), "decode": (g, args)}, ...)):
each function exported alone, then combined with coremltools' own MultiFunctionDescriptor /
save_multifunction, which deduplicates constants across functions, so functions closing over
the same parameters share one copy of the weights. A multifunction package needs Core ML's
iOS18 (macOS15) specification."""
import os
import shutil
import tempfile

from ....errors import BadArgumentError

MIN_TARGET = "iOS18"


def check(functions, options):
    """Refuses a bad {name: (fun, args)} and a deployment target before iOS18; returns the
    options with the target set to iOS18 where none was given."""
    import coremltools as ct
    if not functions:
        raise BadArgumentError("export_coreml: the dict of functions is empty")
    for name, entry in functions.items():
        if not (isinstance(name, str) and name.isidentifier()):
            raise BadArgumentError(f"export_coreml: function name {name!r} must be an "
                                   f"identifier (Swift and Python call it by that name)")
        if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[0])
                and isinstance(entry[1], tuple)):
            raise BadArgumentError(f"export_coreml: functions[{name!r}] must be (function, "
                                   f"tuple of example arguments)")
    from . import Options
    target = options.get("minimum_deployment_target") or MIN_TARGET
    if Options(minimum_deployment_target=target).target.value < ct.target.iOS18.value:
        raise BadArgumentError(
            f"export_coreml: a multifunction package needs minimum_deployment_target='iOS18' "
            f"or later (got {target!r}): Core ML reads several functions from iOS18 / macOS15")
    return dict(options, minimum_deployment_target=target)


def export(export_one, functions, path, default, options):
    """Exports each function with `export_one(fun, *args, path=..., **options)` and writes
    their multifunction package at `path` (returns it)."""
    import json

    import coremltools as ct
    from . import app, compress, progress_bars, save
    from . import cache as package_cache
    options = check(functions, options)
    about = app.pop_metadata(options)
    if "input_descriptions" in about or "output_descriptions" in about:
        raise BadArgumentError("export_coreml: input_descriptions / output_descriptions are "
                               "per function; describe a multifunction package's inputs in "
                               "each function's own export, or leave them out")
    default = default or next(iter(functions))
    if default not in functions:
        raise BadArgumentError(f"export_coreml: default_function={default!r} is not one of "
                               f"{list(functions)}")
    staging = tempfile.mkdtemp(prefix="rlx-multifunction-")
    try:
        desc, reports = None, {}
        for name, (fun, args) in functions.items():
            one = export_one(fun, *args, path=os.path.join(staging, f"{name}.mlpackage"),
                             source=name, **options)
            reports[name] = compress.report(one)
            if desc is None:
                desc = ct.utils.MultiFunctionDescriptor()
            desc.add_function(one, src_function_name="main", target_function_name=name)
        desc.default_function_name = default
        if os.path.exists(path):
            shutil.rmtree(path)
        with package_cache.MIL_LOCK, progress_bars():
            ct.utils.save_multifunction(desc, os.fspath(path))
        kept = {k: r for k, r in reports.items() if r is not None}
        if about or kept:      # save_multifunction keeps no metadata: written on the result
            model = ct.models.MLModel(os.fspath(path), skip_model_load=True)
            if about:
                app.describer(about)(model)
            if kept:           # each function's compression report, by function name
                model.user_defined_metadata["rlx_jax.compression"] = json.dumps(kept)
            save(model, os.fspath(path))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return os.fspath(path)
