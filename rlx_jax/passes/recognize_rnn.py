"""Recognition of flax's recurrent cells under a scan: a Scan whose body is one step of flax's
LSTMCell (or OptimizedLSTMCell), GRUCell or SimpleCell becomes one Lstm, Gru or Rnn node
(ir/reference_rnn.py).

flax's `nn.RNN(cell)`, `nn.scan` over the cell and `lax.scan` over `cell.apply` all trace to a
Scan (frontend/rules/control.py) whose body computes, from the carry ((c, h) or h) and the
step's x, the new carry with the cell's Dense layers, and yields h. The body is matched like a
generated pattern (passes/patterns.py): the template is the cell's own `__call__` traced with
`jax.make_jaxpr` and translated by the frontend (the installed flax's code, nothing written by
hand), matched at the body's new h (and new c), loosely (kinds and sub-operations) then
exactly (re-traced at the bound shapes, every attribute and constant). The match must bind
the carry to the Scan's carry, x to its one scanned input and every kernel and bias to a value
the body takes from outside (a scan constant), and the body's first outputs must be (*new
carry, new h). Then, e.g.

    Scan[length T, reverse False, num_carry 2](weights..., c0, h0, xs)
      -> Lstm(xs, c0, h0, w_ih, w_hh, b)   (outputs: hs, c_T, h_T)

with the per-gate kernels concatenated in the kind's gate order (MIL's) and transposed, the
biases concatenated likewise.

Under `jax.grad` the forward Scan also yields the residuals JAX's autodiff keeps for the
backward Scan, and JAX's partial evaluation has moved the step's loop-invariant operations
(the biases' reshapes, OptimizedLSTMCell's kernel concatenations) out of the body. The body is
matched as if they were in it (passes/rnn_residuals.py: `unhoisted`), and the Scan becomes the
kind followed by its residuals recomputed in parallel over time from its outputs (the carry
before each step: hs shifted, and for an LSTM the cell states, which the Lstm then yields with
its gates' pre-activations), the body's own operations vmapped (an LSTM's gates taken from the
node, no matmul again); the backward Scan stays JAX's. So a training step's forward is the
kind too, e.g.

    Scan[num_carry 2](weights..., c0, h0, xs) -> (c_T, h_T, hs, residuals...)
      -> Lstm[residuals](xs, c0, h0, ...) -> (hs, c_T, h_T, zs, cs);
         residuals = vmap(body with its gates' pre-activations z_t)(c_{t-1}, h_{t-1}, x_t)

A cell with another activation or gate function, a residual SimpleCell, a scan in reverse or
of a symbolic length, a step reading another scanned input or carrying more than the cell's
state, a body with residuals and a host or collective operation is not the formula and stays a
Scan.
"""
import functools

import numpy as np

from ..ir.ops import OpKind as K
from ..ir.reference_rnn import GATES, GRU_GATES
from ..ir.rewrite import dce, rewrite
from .patterns import Matcher, Reference
from .rnn_residuals import recomputable, residuals, unhoisted, yields_gates


def _flax_step(cell, carry_names, params_of):
    """The template of one step of flax's `cell` class (its own code): fn(*carry, x,
    *weights) -> the new carry; params_of(weights) gives the cell's params."""
    def step(*args):
        carry = args[:len(carry_names)]
        x, weights = args[len(carry_names)], args[len(carry_names) + 1:]
        h = carry[-1]
        new, _ = cell(h.shape[-1]).apply({"params": params_of(weights)},
                                         carry if len(carry) > 1 else carry[0], x)
        return tuple(new) if isinstance(new, tuple) else (new,)
    return step


def _dense(kernel, bias=None):
    return {"kernel": kernel} if bias is None else {"kernel": kernel, "bias": bias}


def _lstm_params(w):
    """flax LSTMCell: ii, if, ig, io on x (no bias); hi, hf, hg, ho on h (with the bias)."""
    wi, wh, bias = w[:4], w[4:8], w[8:]
    out = {"i" + g: _dense(k) for g, k in zip("ifgo", wi)}
    out.update({"h" + g: _dense(k, b) for g, k, b in zip("ifgo", wh, bias)})
    return out


def _gru_params(w):
    """flax GRUCell: ir, iz, in on x (with the bias); hr, hz on h (no bias); hn (with it)."""
    wi, wh, bi, bhn = w[:3], w[3:6], w[6:9], w[9]
    out = {"i" + g: _dense(k, b) for g, k, b in zip("rzn", wi, bi)}
    out.update({"hr": _dense(wh[0]), "hz": _dense(wh[1]), "hn": _dense(wh[2], bhn)})
    return out


def _simple_params(w):
    """flax SimpleCell: i on x (with the bias), h on h (no bias)."""
    return {"i": _dense(w[0], w[2]), "h": _dense(w[1])}


class Cell:
    """A flax cell class recognised as `kind`: its carry's names, its weights' names (the
    template's inputs after x) and their shapes (('in' | 'h', 'h') kernels, ('h',) biases)."""

    def __init__(self, name, kind, carry, weights, params_of):
        import flax.linen as nn
        self.kind, self.carry = kind, tuple(carry)
        self.weights = dict(weights)
        self.inputs = self.carry + ("x",) + tuple(self.weights)
        step = _flax_step(getattr(nn, name), self.carry, params_of)
        self.ref = Reference(f"flax nn.{name} step", step, self.inputs, self._example,
                             ranks=(2,), trigger={(K.Activation, "tanh")})

    def _example(self, rank):
        dims, f32 = {"in": 5, "h": 6}, np.float32
        state = ((2, dims["h"]), f32)
        out = {n: state for n in self.carry}
        out["x"] = ((2, dims["in"]), f32)
        out.update({n: (tuple(dims[d] for d in s), f32) for n, s in self.weights.items()})
        return out


def _named(prefix, gates, shape):
    return [(prefix + g, shape) for g in gates]


@functools.lru_cache(maxsize=None)
def _cells():
    try:
        import flax.linen  # noqa: F401
    except ImportError:                              # flax is not installed: nothing to match
        return ()
    return (
        Cell("LSTMCell", K.Lstm, ("c", "h"), _named("wi", "ifgo", ("in", "h"))
             + _named("wh", "ifgo", ("h", "h")) + _named("b", "ifgo", ("h",)), _lstm_params),
        # the same parameters, each side's four kernels concatenated for one matmul per step
        Cell("OptimizedLSTMCell", K.Lstm, ("c", "h"), _named("wi", "ifgo", ("in", "h"))
             + _named("wh", "ifgo", ("h", "h")) + _named("b", "ifgo", ("h",)), _lstm_params),
        Cell("GRUCell", K.Gru, ("h",), _named("wi", "rzn", ("in", "h"))
             + _named("wh", "rzn", ("h", "h")) + _named("bi", "rzn", ("h",))
             + [("bhn", ("h",))], _gru_params),
        Cell("SimpleCell", K.Rnn, ("h",), [("wi", ("in", "h")), ("wh", ("h", "h")),
                                           ("bi", ("h",))], _simple_params),
    )


def _region_index(v):
    """The parameter index of the body Input `v`, or None when v is computed in the body."""
    return v.node.attrs["index"] if v.node is not None and v.node.kind is K.Input else None


def _match_cell(cell, outs):
    """{input name: body value} when the body values `outs` (the new carry) are one step of
    `cell`, loosely then exactly (passes/patterns.py), else None."""
    ref, template = cell.ref, cell.ref.template(2)
    if template is None:
        return None
    got = Matcher(False).root(template.outputs[-1], outs[-1], frozenset())
    if got is None or got[1]:
        return None
    bound = {n: got[0][("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in got[0]}
    types = ref.types(bound) if len(bound) == len(ref.inputs) else None
    exact = types and ref.graph(types, ())
    got = exact and Matcher(True).root(exact.outputs[-1], outs[-1], frozenset())
    if not got or got[1] or any(got[0].get(t.id) is not o
                                for t, o in zip(exact.outputs[:-1], outs[:-1])):
        return None
    return {n: got[0][("in", i)] for i, n in enumerate(ref.inputs)}


def _roles(cell, n):
    """{name: the Scan operand bound to it} when Scan `n` is `cell` over its xs, else None."""
    a, nk = n.attrs, len(cell.carry)
    nc, body = a["num_consts"], n.regions[0]
    if a["reverse"] or a["num_carry"] != nk or len(n.inputs) != nc + nk + 1:
        return None
    if not isinstance(a["length"], (int, np.integer)):     # a symbolic length: left a Scan
        return None
    outs = body.outputs
    if outs[nk] is not outs[nk - 1] or (len(outs) > nk + 1 and not recomputable(n)):
        return None
    bound = _match_cell(cell, outs[:nk])
    if bound is None:
        return None
    index = {k: _region_index(v) for k, v in bound.items()}
    if [index[k] for k in cell.carry + ("x",)] != list(range(nc, nc + nk + 1)):
        return None
    if any(index[k] is None or index[k] >= nc for k in cell.weights):
        return None
    return {k: n.inputs[i] for k, i in index.items()}


def _rows(b, parts, transpose):
    """The per-gate blocks concatenated (kernels: along their columns, then transposed to
    rows); a single block as it is."""
    out = parts[0] if len(parts) == 1 else b.add(K.Concat, parts, {"axis": parts[0].ndim - 1})
    return b.transpose(out, (1, 0)) if transpose else out


def _operands(b, kind, op):
    """The kind's operands from the bound Scan operands `op` (ir/reference_rnn.py's order)."""
    x, h = op["x"], op["h"]
    if kind is K.Lstm:
        return (x, op["c"], h, _rows(b, [op["wi" + g] for g in GATES], True),
                _rows(b, [op["wh" + g] for g in GATES], True),
                _rows(b, [op["b" + g] for g in GATES], False))
    if kind is K.Gru:
        return (x, h, _rows(b, [op["wi" + g] for g in GRU_GATES], True),
                _rows(b, [op["wh" + g] for g in GRU_GATES], True),
                _rows(b, [op["bi" + g] for g in GRU_GATES], False), op["bhn"])
    return x, h, _rows(b, [op["wi"]], True), _rows(b, [op["wh"]], True), op["bi"]


def _emit(b, kind, n, op):
    """The kind's node on the bound operands `op`; the outputs of Scan `n`: (*final carry,
    hs), then its residuals recomputed from hs (passes/rnn_residuals.py)."""
    operands = _operands(b, kind, op)
    outs = tuple(b.add(kind, operands, {"residuals": True} if yields_gates(n, kind) else {}))
    carry = outs[1:n.attrs["num_carry"] + 1]
    return carry + outs[:1] + residuals(b, n, kind, operands, outs)


def recognize_rnn(graph):
    """`graph` with every Scan that is one of flax's cells over a sequence replaced by its
    kind's node (module docstring), in regions too."""
    present = {(m.kind, m.attrs.get("fn")) for m in graph.walk()}
    cells = [c for c in _cells() if c.ref.trigger <= present]
    if not cells or K.Scan not in {k for k, _ in present}:
        return graph

    def replace(b, n, ins):
        if n.kind is not K.Scan:
            return None
        view = unhoisted(n)
        for cell in cells:
            roles = _roles(cell, view)
            if roles is not None:
                return _emit(b, cell.kind, n,
                             {k: b.value_of(v) for k, v in roles.items()})
        return None
    new, count = rewrite(graph, replace, "recognising recurrent cells")
    return dce(new).verify() if count else graph
