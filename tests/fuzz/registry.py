"""The op table: name -> (family, weight, generator). A generator takes a generate.Ctx and
returns (template, args, exact); `weight` is its relative drawing frequency."""
OPS = {}


def op(name, family, weight):
    def register(fn):
        if name in OPS:
            raise KeyError(f"fuzz op {name!r} registered twice")
        OPS[name] = (family, weight, fn)
        return fn
    return register
