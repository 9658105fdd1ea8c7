"""bfloat16 programs on Core ML, which has no bfloat16 tensors.

By default (`bfloat16="host"`) a bfloat16 value is one Core ML cannot hold, so the ops making
or reading it run on the host (placement/plan.py), each named with that reason. With the Core
ML option `bfloat16="float32"` (or `"float16"`) the program's bfloat16 values are computed in
that dtype instead (`widen_bfloat16`, applied by the backend's `prepare` before placement):
every bfloat16 node of the top-level graph is rebuilt at the wider dtype (its dtype attributes
and constants too), a cast to bfloat16 and back becomes nothing, a bfloat16 argument enters
through one Cast and a bfloat16 result leaves through one. Those boundary casts cost nothing:
a bfloat16 model input read only by Casts and a bfloat16 model output made by a Cast travel as
float32 (mil/legality.py: Boundary), converted on the host (exactly in, rounded to nearest
even out, as XLA's convert rounds).

This is a documented numeric divergence, asked for by name: between the boundaries the values
are not rounded to bfloat16 after each op, as JAX does, so results are at least as accurate as
JAX's and differ from them within bfloat16's rounding. A node with control-flow regions that
hold bfloat16 values is left as it is (its operands cast back to bfloat16), and runs on the host
with that reason."""
import jax.numpy as jnp
import numpy as np

from ....ir.graph import Builder
from ....ir.ops import OpKind as K
from ....ir.rewrite import copy_node

BF16 = np.dtype(jnp.bfloat16)
WIDER = ("float32", "float16")


def _has_bf16(node):
    return any(v.dtype == BF16 for m in node.walk() for v in (*m.inputs, *m.outputs))


def _attr(value, to):
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return to if np.dtype(value) == BF16 else value
    if isinstance(value, np.ndarray) and value.dtype == BF16:
        return value.astype(to)
    return value


def widen_bfloat16(graph, to):
    """`graph` with its bfloat16 values computed in dtype `to` (see the module doc)."""
    to = np.dtype(to)
    if not any(_has_bf16(n) for n in graph.nodes):
        return graph
    b = Builder(graph.like())
    env = {}
    for n in graph.nodes:
        b.src = n.src
        if n.kind is K.Input:
            (v,) = copy_node(b, n, [])
            b.graph.inputs.append(v)
            env[n.out.id] = b.cast(v, to) if v.dtype == BF16 else v
            continue
        ins = [env[v.id] for v in n.inputs]
        if n.regions and _has_bf16(n):
            ins = [b.cast(x, BF16) if v.dtype == BF16 else x for x, v in zip(ins, n.inputs)]
            outs = [b.cast(o, to) if o.dtype == BF16 else o for o in copy_node(b, n, ins)]
        elif n.kind is K.Cast:
            dst = np.dtype(n.attrs["dtype"])
            outs = [b.cast(ins[0], to if dst == BF16 else dst)]
        elif not any(v.dtype == BF16 for v in (*n.inputs, *n.outputs)):
            outs = copy_node(b, n, ins)
        else:
            attrs = {k: _attr(a, to) for k, a in n.attrs.items()}
            out = b.add(n.kind, ins, attrs, regions=n.regions)
            outs = out if isinstance(out, tuple) else (out,)
        for o, new in zip(n.outputs, outs):
            env[o.id] = new
    b.graph.outputs = [b.cast(env[v.id], BF16) if v.dtype == BF16 else env[v.id]
                       for v in graph.outputs]
    return b.graph
