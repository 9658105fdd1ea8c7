"""A recurrent cell's forward scan under autodiff (passes/recognize_rnn.py): its hoisted
constants pulled back into its body for matching, and its residuals recomputed in parallel
over time from its kind's outputs.

JAX's partial evaluation of the scan moves the step's loop-invariant operations out of the
body: the cell's Dense biases reshaped to [1, H], OptimizedLSTMCell's concatenated kernels
arrive as the Scan's constants. `unhoisted` gives a view of the Scan whose body computes them
again from their operands (the layout operations Reshape and Concat only), which is the form
the cell's template has; the Scan itself is left as it is.

Under `jax.grad` the forward Scan of a cell yields, after (*new carry, new h), the per-step
values its transposed Scan reads (JAX's residuals: the gates' activations and derivatives,
the carry before the step, ...). Every value of the body is a function of the carry before
the step, the step's x and the scan's constants (the weights), and once the kind has run the
carry before every step is known for all steps at once:

    h_{t-1}   (h0, h_1, ..., h_{T-1}): hs shifted by one step, h0 first (every cell's carry
              ends with h; GRUCell's and SimpleCell's is h alone)
    c_{t-1}   LSTMCell only: the Lstm node yields every step's c_t and its gates'
              pre-activations z_t (`yields_gates`: the kind's attribute residuals,
              ir/reference_rnn.py); c_{t-1} is cs shifted, c0 first. The body's
              pre-activations (the operands of σ(i), σ(f), σ(o), tanh(g), read off the
              cell's update: `lstm_gates_in`) are not recomputed but taken as the slices of
              z_t in the kind's gate order (i, f, o, g), so no matmul runs twice and what is
              left of the body is elementwise (`lstm_residual_graph`)

Then the residuals are the body's own operations vmapped over time (`jax.vmap` of the body's
reference semantics, translated into the graph, per-step operands batched along axis 0): no
recurrence but the kind's, and the backward Scan reads them as it read the forward Scan's.
A body holding host or collective operations (effects that recomputation would repeat) is
not recomputed: its Scan stays.
"""
import functools

import jax
import jax.numpy as jnp

from ..ir.graph import Builder, Graph, Node
from ..ir.ops import COLLECTIVES, HOST_ONLY, OpKind as K
from ..ir.reference import REFERENCE, region_function
from ..ir.reference_rnn import GATES, before
from ..ir.rewrite import copy_node, dce
from .decompose.formulas import inline


LAYOUT = frozenset({K.Reshape, K.Concat})     # what JAX hoists out of the flax cells' steps


def _hoisted(v):
    return v.node is not None and v.node.kind in LAYOUT


def unhoisted(scan):
    """A view of `scan` (not in any graph; its outputs are scan's) whose constants are the
    operands of the layout operations that computed scan's constants, and whose body computes
    those operations first; `scan` itself where none of its constants is one's result."""
    nc = scan.attrs["num_consts"]
    if not any(_hoisted(v) for v in scan.inputs[:nc]):
        return scan
    leaves = {}

    def collect(v):
        if _hoisted(v):
            for u in v.node.inputs:
                collect(u)
        else:
            leaves.setdefault(v.id, v)
    for v in scan.inputs[:nc]:
        collect(v)
    body = scan.regions[0]
    b = Builder(Graph(body.name))
    env = {v.id: b.input(v.shape, v.dtype) for v in leaves.values()}
    for v in body.inputs[nc:]:
        env[v.id] = b.input(v.shape, v.dtype)

    def emit(v):
        if v.id not in env:
            outs = copy_node(b, v.node, [emit(u) for u in v.node.inputs])
            env[v.id] = outs[v.index]
        return env[v.id]
    for v, inner in zip(scan.inputs[:nc], body.inputs):
        env[inner.id] = emit(v)
    for n in body.nodes:
        if n.kind is not K.Input:
            for o, new in zip(n.outputs, copy_node(b, n, [env[u.id] for u in n.inputs])):
                env[o.id] = new
    b.graph.outputs = [env[v.id] for v in body.outputs]
    view = Node(K.Scan, tuple(leaves.values()) + scan.inputs[nc:],
                dict(scan.attrs, num_consts=len(leaves)), scan.src, (b.graph,))
    view.outputs = scan.outputs
    return view


def subgraph(name, inputs, nodes, outputs):
    """A graph of the values `inputs` computing `outputs` with copies of `nodes` (in order)."""
    b = Builder(Graph(name))
    env = {v.id: b.input(v.shape, v.dtype) for v in inputs}
    for n in nodes:
        for o, new in zip(n.outputs, copy_node(b, n, [env[u.id] for u in n.inputs])):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in outputs]
    return dce(b.graph)


def _fn(v):
    n = v.node
    return None if n is None else (n.kind, n.attrs.get("fn"))


def _product(v, known=None):
    """The factors of v = a·b, the value `known` (if a factor) last; None if v is not one."""
    if _fn(v) != (K.Binary, "mul"):
        return None
    a, b = v.node.inputs
    return (b, a) if known is not None and a.id == known.id else (a, b)


def lstm_gates_in(body, nc):
    """The values of an LSTM cell's forward body (its carry (c, h) from input nc) that are the
    gates' pre-activations, in the kind's gate order (GATES): read off the cell's update
    c' = σ(f)·c + σ(i)·tanh(g), h' = σ(o)·tanh(c'), which the body is (recognised); None
    where its outputs are not of that form."""
    c, new_c, new_h = body.inputs[nc], body.outputs[0], body.outputs[1]
    if _fn(new_c) != (K.Binary, "add"):
        return None
    gates = {}
    for term in new_c.node.inputs:
        got = _product(term, c)
        if got is None:
            return None
        if got[1].id == c.id:
            gates["f"] = got[0]
        else:
            for v in got:
                gates["g" if _fn(v) == (K.Activation, "tanh") else "i"] = v
    got = _product(new_h)
    tanh_c = [v for v in got or () if _fn(v) == (K.Activation, "tanh")
              and v.node.inputs[0].id == new_c.id]
    if not tanh_c:
        return None
    gates["o"] = got[0] if got[1] is tanh_c[0] else got[1]     # got: not None
    want = {g: "tanh" if g == "g" else "sigmoid" for g in GATES}
    if set(gates) != set(GATES) or any(_fn(gates[g]) != (K.Activation, want[g]) for g in GATES):
        return None
    return [gates[g].node.inputs[0] for g in GATES]


def lstm_residual_graph(body, nc, nk):
    """A graph of (body's inputs..., the gates' pre-activations in GATES order) computing
    body's residual outputs, the pre-activations not computed (so no matmul), or of body's
    inputs alone where they are not found (`lstm_gates_in`)."""
    pre = lstm_gates_in(body, nc) or []
    skip = {v.id for v in pre}
    nodes = [n for n in body.nodes if n.kind is not K.Input
             and not any(o.id in skip for o in n.outputs)]
    return subgraph(body.name + ".residuals", list(body.inputs) + pre, nodes,
                    body.outputs[nk + 1:])


def lstm_residuals(*operands, graph, nc):
    """The residuals of an LSTM cell's forward Scan from the Lstm node's outputs (the Scan's
    constants, then c0, h0, x, hs, zs, cs): `graph` (`lstm_residual_graph`) vmapped over time
    at c_{t-1}, h_{t-1}, x_t and the slices of z_t."""
    consts, (c0, h0, x, hs, zs, cs) = operands[:nc], operands[nc:]
    pre = jnp.split(zs, len(GATES), axis=-1)[:len(graph.inputs) - nc - 3]
    run = jax.vmap(region_function(graph), in_axes=(None,) * nc + (0,) * (3 + len(pre)))
    return run(*consts, before(c0, cs), before(h0, hs), x, *pre)


def yields_gates(scan, kind):
    """Whether the `kind` node replacing `scan` is to yield its residual outputs (ir/
    reference_rnn.py: an Lstm's zs and cs) for `residuals`."""
    a = scan.attrs
    return kind is K.Lstm and len(scan.outputs) > a["num_carry"] + 1 and a["length"] > 0


def recomputable(scan):
    """Whether the body of `scan` can be re-run vmapped: every operation has a reference and
    none is a host or collective operation."""
    return all(n.kind is K.Input or (n.kind in REFERENCE and n.kind not in HOST_ONLY |
                                      COLLECTIVES) for n in scan.regions[0].walk())


def residuals(b, scan, kind, operands, outs):
    """The outputs of `scan` after (*new carry, new h), recomputed in `b` (module docstring)
    from the `kind` node's `operands` (x, the initial carry, the weights: the kind's order)
    and its outputs `outs` (hs first; an Lstm's zs and cs last, `yields_gates`); the Scan's
    constants as they are in `b`."""
    a = scan.attrs
    nc, nk = a["num_consts"], a["num_carry"]
    if len(scan.outputs) == nk + 1:
        return ()
    body, x, hs = scan.regions[0], operands[0], outs[0]
    consts = [b.value_of(v) for v in scan.inputs[:nc]]
    if a["length"] == 0:                                # nothing to compute: empty arrays
        rest = scan.outputs[nk + 1:]
        out = inline(b, lambda: tuple(jnp.zeros(v.shape, v.dtype) for v in rest), ())
    elif kind is K.Lstm:
        graph = lstm_residual_graph(body, nc, nk)
        out = inline(b, functools.partial(lstm_residuals, graph=graph, nc=nc),
                     consts + list(operands[1:3]) + [x, hs] + list(outs[3:5]))
    else:
        run = region_function(body)

        def step(*args):
            return run(*args)[nk + 1:]
        batched = jax.vmap(step, in_axes=(None,) * nc + (0,) * (nk + 1))
        out = inline(b, batched, consts + [inline(b, before, (operands[1], hs)), x])
    return out if isinstance(out, tuple) else (out,)
