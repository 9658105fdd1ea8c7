"""Recognition of flax's recurrent cells under a scan: a Scan whose body is flax's LSTMCell step
becomes one Lstm node (ir/reference_rnn.py).

flax's `nn.RNN(nn.LSTMCell(H))`, `nn.scan` over the cell and `lax.scan` over `cell.apply`
all trace to a Scan (frontend/rules/control.py) whose body computes, from the carry (c, h)
and the step's x, the new (c, h) with the cell's eight Dense layers, and yields h. The body is
matched like a generated pattern (passes/patterns.py): the template is flax's own
`LSTMCell.__call__` traced with `jax.make_jaxpr` and translated by the frontend (the installed
flax's code, nothing written by hand), matched at the body's new c and new h, loosely (kinds
and sub-operations) then exactly (re-traced at the bound shapes, every attribute and
constant). The match must bind c and h to the carry, x to the scanned input and every kernel
and bias to a value the body takes from outside (a scan constant), and the body must return
exactly (new c, new h, new h). Then

    Scan[length T, reverse False, num_carry 2](weights..., c0, h0, xs)
      -> Lstm(xs, c0, h0, w_ih, w_hh, b)   (outputs: hs, c_T, h_T)

with w_ih, w_hh the gate kernels concatenated in MIL's gate order (i, f, o, g) and transposed,
b the h-side biases concatenated likewise. A cell with another activation, a peephole, a
layer norm, a scan in reverse, a body with more outputs (the residuals a forward scan keeps
for JAX's autodiff of it: the forward Scan inside `jax.grad` is one of these) is not the
formula and stays a Scan.
"""
import numpy as np

from ..ir.ops import OpKind as K
from ..ir.reference_rnn import GATES
from ..ir.rewrite import dce, rewrite
from .patterns import Matcher, Reference

FLAX_GATES = ("i", "f", "g", "o")       # flax's Dense names: i{gate} (input), h{gate} (hidden)
_W_IN = tuple("wi" + g for g in FLAX_GATES)
_W_H = tuple("wh" + g for g in FLAX_GATES)
_BIAS = tuple("b" + g for g in FLAX_GATES)
INPUTS = ("c", "h", "x") + _W_IN + _W_H + _BIAS


def _flax_lstm_step(c, h, x, *weights):
    """One step of the installed flax's nn.LSTMCell (its own code): (new c, new h)."""
    import flax.linen as nn
    wi, wh, bias = weights[:4], weights[4:8], weights[8:]
    params = {"i" + g: {"kernel": k} for g, k in zip(FLAX_GATES, wi)}
    params.update({"h" + g: {"kernel": k, "bias": bb} for g, k, bb in zip(FLAX_GATES, wh, bias)})
    (new_c, new_h), _ = nn.LSTMCell(h.shape[-1]).apply({"params": params}, (c, h), x)
    return new_c, new_h


def _example(rank):
    batch, hidden, features = (2,) * (rank - 1), 6, 5
    state, f32 = (batch + (hidden,), np.float32), np.float32
    out = {"c": state, "h": state, "x": (batch + (features,), f32)}
    out.update({n: ((features, hidden), f32) for n in _W_IN})
    out.update({n: ((hidden, hidden), f32) for n in _W_H})
    out.update({n: ((hidden,), f32) for n in _BIAS})
    return out


LSTM_CELL = Reference("flax nn.LSTMCell step", _flax_lstm_step, INPUTS, _example, ranks=(2,),
                      trigger={(K.Activation, "sigmoid"), (K.Activation, "tanh")})


def _region_index(v):
    """The parameter index of the body Input `v`, or None when v is computed in the body."""
    return v.node.attrs["index"] if v.node is not None and v.node.kind is K.Input else None


def _match_cell(outs):
    """{input name: body value} when the body values `outs` (new c, new h) are flax's LSTMCell
    step, loosely then exactly (passes/patterns.py), else None."""
    template = LSTM_CELL.template(2)
    got = Matcher(False).root(template.outputs[1], outs[1], frozenset())
    if got is None or got[1]:
        return None
    bound = {n: got[0][("in", i)] for i, n in enumerate(INPUTS) if ("in", i) in got[0]}
    types = LSTM_CELL.types(bound) if len(bound) == len(INPUTS) else None
    exact = types and LSTM_CELL.graph(types, ())
    got = exact and Matcher(True).root(exact.outputs[1], outs[1], frozenset())
    if not got or got[1] or got[0].get(exact.outputs[0].id) is not outs[0]:
        return None
    return {n: got[0][("in", i)] for i, n in enumerate(INPUTS)}


def _lstm_roles(n):
    """{name: the Scan operand bound to it} when Scan `n` is flax's LSTMCell over its xs, else
    None (module docstring)."""
    a = n.attrs
    nc, body = a["num_consts"], n.regions[0]
    if a["reverse"] or a["num_carry"] != 2 or len(n.inputs) != nc + 3:
        return None
    outs = body.outputs
    if len(outs) != 3 or outs[2] is not outs[1]:
        return None
    bound = _match_cell(outs)
    if bound is None:
        return None
    index = {k: _region_index(v) for k, v in bound.items()}
    if (index["c"], index["h"], index["x"]) != (nc, nc + 1, nc + 2):
        return None
    if any(index[k] is None or index[k] >= nc for k in _W_IN + _W_H + _BIAS):
        return None
    return {k: n.inputs[i] for k, i in index.items()}


def _stack(b, parts, transpose):
    """The per-gate blocks (flax order) concatenated in GATES order (rows, once transposed)."""
    order = [parts[FLAX_GATES.index(g)] for g in GATES]
    out = b.add(K.Concat, order, {"axis": order[0].ndim - 1})
    return b.transpose(out, (1, 0)) if transpose else out


def recognize_rnn(graph):
    """`graph` with every Scan that is flax's LSTMCell over a sequence replaced by one Lstm
    node (module docstring), in regions too."""
    present = {(m.kind, m.attrs.get("fn")) for m in graph.walk()}
    if K.Scan not in {k for k, _ in present} or not LSTM_CELL.trigger <= present:
        return graph
    if LSTM_CELL.template(2) is None:               # flax is not installed
        return graph

    def replace(b, n, ins):
        if n.kind is not K.Scan:
            return None
        roles = _lstm_roles(n)
        if roles is None:
            return None
        op = {k: b.value_of(v) for k, v in roles.items()}
        w_ih = _stack(b, [op[k] for k in _W_IN], True)
        w_hh = _stack(b, [op[k] for k in _W_H], True)
        bias = _stack(b, [op[k] for k in _BIAS], False)
        hs, c, h = b.add(K.Lstm, (op["x"], op["c"], op["h"], w_ih, w_hh, bias), {})
        return c, h, hs
    new, count = rewrite(graph, replace, "recognising recurrent cells")
    return dce(new).verify() if count else graph
