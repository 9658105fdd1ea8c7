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
    c_{t-1}   LSTMCell only: c_t = σ(f_t)·c_{t-1} + σ(i_t)·tanh(g_t), whose coefficients are
              functions of h_{t-1} and x_t, so c is a linear recurrence in known coefficients,
              solved by a parallel prefix (`prefix_linear`: ⌈log2(T + 1)⌉ rounds of products
              over the whole sequence; MIL's lstm op gives only the final cell state). The
              body is split at c (`split`): its part independent of c (the gates, every
              matmul) runs once over all steps, and the coefficients are the value and the
              derivative of the new c at c = 0 in the rest (`lstm_residuals`)

Then the residuals are the body's own operations vmapped over time (`jax.vmap` of the body's
reference semantics, translated into the graph, per-step operands batched along axis 0): no
recurrence but the kind's, and the backward Scan reads them as it read the forward Scan's.
A body holding host or collective operations (effects that recomputation would repeat) is
not recomputed: its Scan stays.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..ir.graph import Builder, Graph, Node
from ..ir.ops import COLLECTIVES, HOST_ONLY, OpKind as K
from ..ir.reference import REFERENCE, region_function
from ..ir.rewrite import copy_node
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


def before(s0, seq):
    """The state before each step: (s0, seq_0, ..., seq_{T-2}) along axis 0, [T, ...]."""
    return jnp.concatenate([s0[None], seq])[:-1]


def prefix_linear(a, u):
    """y_t = a_t·y_{t-1} + u_t along axis 0 (y_{-1} = 0), by doubling: after the round of
    offset d, entry t holds the composition of the steps t - 2d + 1 .. t."""
    zero, one = np.zeros((), a.dtype), np.ones((), a.dtype)
    d = 1
    while d < a.shape[0]:
        pad = [(d, 0, 0)] + [(0, 0, 0)] * (a.ndim - 1)
        u = a * lax.pad(u[:-d], zero, pad) + u
        a = a * lax.pad(a[:-d], one, pad)
        d *= 2
    return u


def subgraph(name, inputs, nodes, outputs):
    """A graph of the values `inputs` computing `outputs` with copies of `nodes` (in order)."""
    b = Builder(Graph(name))
    env = {v.id: b.input(v.shape, v.dtype) for v in inputs}
    for n in nodes:
        for o, new in zip(n.outputs, copy_node(b, n, [env[u.id] for u in n.inputs])):
            env[o.id] = new
    b.graph.outputs = [env[v.id] for v in outputs]
    return b.graph


def split(body, unknown):
    """(known, rest) of the region `body`, split at its inputs `unknown` (partial evaluation):
    `known`, of body's other inputs, computes the values independent of `unknown` that the
    rest reads (the boundary); `rest`, of (the boundary..., body's inputs), computes body's
    outputs with only the operations depending on `unknown` (constants copied)."""
    dep = {v.id for v in unknown}
    known, rest = [], []
    for n in body.nodes:
        if n.kind is K.Input:
            continue
        if any(u.id in dep for u in n.inputs):
            dep.update(o.id for o in n.outputs)
            rest.append(n)
        else:
            known.append(n)
    reads = [u for n in rest for u in n.inputs] + list(body.outputs)
    boundary = list({u.id: u for u in reads if u.id not in dep and u.node is not None
                     and u.node.kind not in (K.Input, K.Constant)}.values())
    consts = [n for n in known if n.kind is K.Constant]
    args = [v for v in body.inputs if v.id not in {u.id for u in unknown}]
    return (subgraph(body.name + ".known", args, known, boundary),
            subgraph(body.name + ".rest", boundary + list(body.inputs), consts + rest,
                     body.outputs))


def lstm_residuals(consts, c0, h0, x, hs, *, known, rest, nk):
    """The residuals of an LSTM cell's forward Scan whose body was split at c (`split`) into
    `known` (of consts, h, x: the gates, every matmul) and `rest` (the cell state's update):
    the gates of all steps at once from h_{t-1} (`before`), σ(f_t) and σ(i_t)·tanh(g_t) as the
    derivative and the value of the new c at c_{t-1} = 0 (the update is linear in c), c_{t-1}
    by `prefix_linear`, then `rest` at c_{t-1}: each matmul once."""
    nc, h = len(consts), before(h0, hs)
    bound = jax.vmap(region_function(known), in_axes=(None,) * nc + (0, 0))(*consts, h, x)
    run = jax.vmap(region_function(rest), in_axes=(0,) * len(bound) + (None,) * nc + (0,) * 3)

    def new_c(c):
        return run(*bound, *consts, c, h, x)[0]
    zero = jnp.zeros_like(h)
    u, a = jax.jvp(new_c, (zero,), (jnp.ones_like(zero),))
    c = prefix_linear(jnp.concatenate([zero[:1], a]), jnp.concatenate([c0[None], u]))[:-1]
    return run(*bound, *consts, c, h, x)[nk + 1:]


def recomputable(scan):
    """Whether the body of `scan` can be re-run vmapped: every operation has a reference and
    none is a host or collective operation."""
    return all(n.kind is K.Input or (n.kind in REFERENCE and n.kind not in HOST_ONLY |
                                      COLLECTIVES) for n in scan.regions[0].walk())


def residuals(b, scan, kind, operands, hs):
    """The outputs of `scan` after (*new carry, new h), recomputed in `b` (module docstring)
    from the `kind` node's `operands` (x, the initial carry, the weights: the kind's order)
    and its hs; the Scan's constants as they are in `b`."""
    a = scan.attrs
    nc, nk = a["num_consts"], a["num_carry"]
    if len(scan.outputs) == nk + 1:
        return ()
    body, x = scan.regions[0], operands[0]
    consts = [b.value_of(v) for v in scan.inputs[:nc]]
    if kind is K.Lstm:
        known, rest = split(body, body.inputs[nc:nc + 1])
        out = inline(b, lambda *v: lstm_residuals(v[:nc], *v[nc:], known=known, rest=rest,
                                                  nk=nk), consts + list(operands[1:3]) + [x, hs])
        return out if isinstance(out, tuple) else (out,)
    run = region_function(body)

    def step(*args):
        return run(*args)[nk + 1:]
    batched = jax.vmap(step, in_axes=(None,) * nc + (0,) * (nk + 1))
    out = inline(b, batched, consts + [inline(b, before, (operands[1], hs)), x])
    return out if isinstance(out, tuple) else (out,)
