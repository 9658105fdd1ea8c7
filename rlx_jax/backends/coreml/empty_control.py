"""Zero-size folding of control flow (the FOLDS entry of empty.py for Scan).

A zero-length Scan runs no step: its final carry is its initial carry and its ys are empty, so
it folds away whatever its body is. Any other control-flow node with a zero-size operand or
result is refused by name (Core ML has no empty tensors; a body cannot be folded statically).

Given / Result (lax.scan(f, c0, xs) with xs: f32[0,3]):
    Scan[length=0] c0 xs  ->  final carry = c0 (a model value), ys = zeros((0, ...)) on the host
"""
from ...ir.ops import OpKind as K


def zero_length(node):
    """Whether `node` is a Scan that runs no step."""
    return node.kind is K.Scan and node.attrs["length"] == 0


def fold_scan(b, node, ins):
    from .empty import Known, _refuse
    if not zero_length(node):
        _refuse(node)
    nconst, ncarry = node.attrs["num_consts"], node.attrs["num_carry"]
    carry = list(ins[nconst:nconst + ncarry])
    return tuple(carry) + tuple(Known(y) for y in node.outputs[ncarry:])
