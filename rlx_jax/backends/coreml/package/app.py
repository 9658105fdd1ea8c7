"""What an app reads from an exported package (export_coreml's author, version, license,
description, input_descriptions, output_descriptions): coremltools' MLModel fields, which
Xcode shows and its generated Swift class documents."""
from ....errors import BadArgumentError

FIELDS = ("author", "version", "license", "description", "input_descriptions",
          "output_descriptions")


def pop_metadata(options):
    """export_coreml's metadata keywords, taken out of `options` and checked."""
    about = {k: options.pop(k) for k in FIELDS if k in options}
    for k in ("author", "version", "license", "description"):
        if k in about and not isinstance(about[k], str):
            raise BadArgumentError(f"export_coreml: {k}= must be a str, got "
                                   f"{type(about[k]).__name__}")
    for k in ("input_descriptions", "output_descriptions"):
        if k in about and not (isinstance(about[k], dict) and all(
                isinstance(n, str) and isinstance(t, str) for n, t in about[k].items())):
            raise BadArgumentError(f"export_coreml: {k}= must be a dict of model "
                                   f"{k.split('_')[0]} name -> description text")
    return about


def describer(about):
    """A function writing `about` into an MLModel before it is saved (None: nothing to
    write); a description for a name the model does not have is refused, naming the names."""
    if not about:
        return None

    def finish(model):
        if "author" in about:
            model.author = about["author"]
        if "version" in about:
            model.version = about["version"]
        if "license" in about:
            model.license = about["license"]
        if "description" in about:
            model.short_description = about["description"]
        spec = model.get_spec().description
        for key, have, target in (("input_descriptions", spec.input, model.input_description),
                                  ("output_descriptions", spec.output,
                                   model.output_description)):
            names = [f.name for f in have]
            for name, text in about.get(key, {}).items():
                if name not in names:
                    raise BadArgumentError(f"export_coreml: {key} names {name!r}; the model's "
                                           f"{key.split('_')[0]}s are {names}")
                target[name] = text
    return finish
