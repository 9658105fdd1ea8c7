"""Flexible Core ML inputs from symbolic dimensions (export_coreml at jax.export's symbolic
ShapeDtypeStructs): each symbolic input dimension becomes a `RangeDim` bounded by the declared
constraints (`t <= 512` -> upper bound 512, `t >= 2` -> lower bound 2; an ML Program takes
no unbounded range, so every symbol needs an upper bound), or, when the user lists sizes, the
inputs take `EnumeratedShapes` (the shapes at those sizes). A constraint over several symbols
or a compound expression has no place in a model description, which holds per-dimension
bounds only: it is refused, not dropped."""
from ....errors import BadArgumentError, RefusalError
from ....ir import dims


def bounds(symbols, constraints):
    """{symbol: (lower, upper)} from the constraints (upper -1: unbounded)."""
    out = {s: [1, -1] for s in symbols}
    for c in constraints:
        left, right = c.e1, c.e2                # c: left >= right, or left == right
        name_l, name_r = dims.plain_symbol(left), dims.plain_symbol(right)
        const_l, const_r = not dims.is_symbolic(left), not dims.is_symbolic(right)
        if c.cmp.name == "GEQ" and name_l in out and const_r:
            out[name_l][0] = max(out[name_l][0], int(right))
        elif c.cmp.name == "GEQ" and const_l and name_r in out:
            upper = out[name_r][1]
            out[name_r][1] = int(left) if upper < 0 else min(upper, int(left))
        else:
            raise RefusalError(
                f"the constraint '{c.debug_str}' is not a bound on one symbol; a Core ML model "
                f"description holds a range per input dimension only, so a package cannot keep "
                f"it: export with per-symbol bounds ('t <= 512', 't >= 2'), or with "
                f"enumerated_sizes")
    return {s: tuple(b) for s, b in out.items()}


def input_types(names, graph, default_sizes=None, enumerated_sizes=None):
    """coremltools TensorTypes for the model inputs (`names`, one per graph input), bounded by
    the constraints of the symbols' scope."""
    import coremltools as ct
    symbols = sorted(dims.symbols(d for v in graph.inputs for d in v.shape))
    constraints = dims.constraints([v.shape for v in graph.inputs])
    if enumerated_sizes:
        return _enumerated(ct, names, graph, symbols, enumerated_sizes, default_sizes)
    limits = bounds(symbols, constraints)
    default_sizes = dict(default_sizes or {})
    unknown = sorted(set(default_sizes) - set(symbols))
    if unknown:
        raise BadArgumentError(f"default_sizes names {unknown}, which no input has; the "
                               f"symbols are {symbols}")
    types = []
    for name, v in zip(names, graph.inputs):
        shape = []
        for d in v.shape or (1,):
            s = dims.plain_symbol(d)
            if s is None:
                shape.append(int(d))
                continue
            lo, hi = limits[s]
            if hi < 0:
                raise RefusalError(
                    f"the symbolic dimension '{s}' has no upper bound; a Core ML ML Program's "
                    f"flexible input needs one (coremltools refuses an unbounded RangeDim): "
                    f"declare it, e.g. constraints=['{s} <= 512'], or list the sizes with "
                    f"enumerated_sizes")
            default = default_sizes.get(s, lo)
            if default < lo or (hi > 0 and default > hi):
                raise BadArgumentError(f"default_sizes['{s}'] = {default} is outside "
                                       f"{lo}..{hi if hi > 0 else 'unbounded'}")
            shape.append(ct.RangeDim(lower_bound=lo, upper_bound=hi, default=default))
        types.append(ct.TensorType(name=name, shape=ct.Shape(shape=shape)))
    return types


def _enumerated(ct, names, graph, symbols, sizes, default_sizes):
    """EnumeratedShapes: each input's shape at each listed size (a dict symbol -> int)."""
    if len(sizes) > 128:
        raise BadArgumentError(f"enumerated_sizes lists {len(sizes)} sizes; a Core ML model "
                               f"takes at most 128 enumerated shapes per input")
    for i, env in enumerate(sizes):
        if set(env) != set(symbols):
            raise BadArgumentError(f"enumerated_sizes[{i}] = {env} must give every symbol "
                                   f"{symbols}, and only those")
    default = default_sizes or sizes[0]
    types = []
    for name, v in zip(names, graph.inputs):
        shape = v.shape or (1,)
        at = [tuple(dims.evaluate(d, env) for d in shape) for env in sizes]
        unique = list(dict.fromkeys(at))
        if len(unique) == 1:
            types.append(ct.TensorType(name=name, shape=unique[0]))
            continue
        types.append(ct.TensorType(name=name, shape=ct.EnumeratedShapes(
            shapes=unique, default=tuple(dims.evaluate(d, default) for d in shape))))
    return types
