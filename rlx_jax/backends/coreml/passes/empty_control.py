"""Zero-size folding of control flow (the FOLDS entries of passes/empty.py for Scan and the
recurrent kinds).

A zero-length Scan runs no step: its final carry is its initial carry and its ys are empty, so
it folds away whatever its body is; so does a recurrent kind (Lstm, Gru, Rnn) over an empty
sequence: its final state is its initial state. Any other control-flow node with a zero-size
operand or result is refused by name (Core ML has no empty tensors; a body cannot be folded
statically).

Given / Result (lax.scan(f, c0, xs) with xs: f32[0,3]):
    Scan[length=0] c0 xs  ->  final carry = c0 (a model value), ys = zeros((0, ...)) on the host
    Lstm x[0, B, I] c0 h0 ...  ->  hs = zeros((0, B, H)) on the host, c_T = c0, h_T = h0
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


RECURRENT = (K.Lstm, K.Gru, K.Rnn)      # operands x, the initial state(s), the weights


def fold_recurrent(b, node, ins, empty, refuse):
    """Over an empty sequence: the hidden states (empty) from a copy of the node that nothing
    reads afterwards, then the initial state(s) as the final one(s)."""
    if node.inputs[0].shape[0] != 0:
        return refuse(b, node, ins, empty)
    states = len(node.outputs) - 1
    return (copy_node(b, node, ins)[0],) + tuple(ins[1:1 + states])
