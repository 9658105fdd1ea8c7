"""Flexible inputs in the MIL executor, read as strictly as Core ML's runtime reads them: a feed
must have a shape the model description allows (its fixed shape, a shape inside every
dimension's range, or one of its enumerated shapes), and inside the program every value whose
type has symbolic dimensions must have that type's rank and fixed sizes, with each symbol one
size throughout the call."""
from ....errors import LoweringError, ShapeConstraintError


def allowed_shapes(feature):
    """("fixed", shape) | ("range", [(lo, hi), ...]) | ("enumerated", [shape, ...]) of an
    input's description (hi -1: unbounded)."""
    t = feature.type.multiArrayType
    if t.HasField("shapeRange"):
        return "range", [(r.lowerBound, r.upperBound) for r in t.shapeRange.sizeRanges]
    if t.HasField("enumeratedShapes"):
        return "enumerated", [tuple(s.shape) for s in t.enumeratedShapes.shapes]
    return "fixed", tuple(t.shape)


def check_feed(name, shape, allowed):
    """ShapeConstraintError when `shape` is not one the model takes for input `name`."""
    if allowed is None:
        return
    kind, what = allowed
    shape = tuple(int(d) for d in shape)
    if kind == "fixed":
        ok = not what or shape == what
    elif kind == "range":
        ok = len(shape) == len(what) and all(
            lo <= d and (hi < 0 or d <= hi) for d, (lo, hi) in zip(shape, what))
    else:
        ok = shape in what
    if not ok:
        raise ShapeConstraintError(
            f"the model input '{name}' has shape {shape}; its description takes {kind} "
            f"{_text(kind, what)} (Core ML refuses any other shape)")


def _text(kind, what):
    if kind == "range":
        return "[" + ", ".join(f"{lo}..{hi if hi >= 0 else 'inf'}" for lo, hi in what) + "]"
    return str(what)


def any_symbolic(shape):
    from coremltools.converters.mil.mil.types.symbolic import is_symbolic
    return any(is_symbolic(d) for d in shape)


def bind_sizes(sizes, op, var, shape):
    """Checks a computed value's `shape` against its var's symbolic type; binds symbols."""
    from coremltools.converters.mil.mil.types.symbolic import is_symbolic
    typed = tuple(var.shape)
    if len(shape) != len(typed):
        _wrong(op, var, shape)
    for d, n in zip(typed, shape):
        if not is_symbolic(d):
            if int(d) != n:
                _wrong(op, var, shape)
        elif sizes.setdefault(d, n) != n:
            _wrong(op, var, shape, f"; {d} is {sizes[d]} elsewhere in this call")


def _wrong(op, var, shape, more=""):
    raise LoweringError(f"MIL executor: {op.op_type} gave {var.name} the shape {tuple(shape)}, "
                        f"which its type {tuple(var.shape)} does not allow{more}")
