"""Zero-size folding of control flow (the FOLDS entry of passes/empty.py for Scan).

A zero-length Scan runs no step: its final carry is its initial carry and its ys are empty, so
it folds away whatever its body is. Any other control-flow node with a zero-size operand or
result is refused by name (Core ML has no empty tensors; a body cannot be folded statically).

Given / Result (lax.scan(f, c0, xs) with xs: f32[0,3]):
    Scan[length=0] c0 xs  ->  final carry = c0 (a model value), ys = zeros((0, ...)) on the host
"""
from ....ir.ops import OpKind as K
from ....ir.rewrite import copy_node


def zero_length(node):
    """Whether `node` is a Scan that runs no step."""
    return node.kind is K.Scan and node.attrs["length"] == 0


def fold_scan(b, node, ins, empty, refuse):
    """The initial carry, and for the (empty, statically known) ys the outputs of a copy of the
    node, which nothing reads afterwards and dce drops."""
    if not zero_length(node):
        refuse(b, node, ins, empty)
    nconst, ncarry = node.attrs["num_consts"], node.attrs["num_carry"]
    carry = tuple(ins[nconst:nconst + ncarry])
    return carry + tuple(copy_node(b, node, ins)[ncarry:])
