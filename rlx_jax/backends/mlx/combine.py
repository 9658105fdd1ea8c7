"""All-reduce combining: a run of consecutive AllReduce nodes of one fn, axis and dtype (what
`jax.lax.pmean` of a gradient pytree stages: one psum per leaf) becomes one AllReduce of the
leaves flattened and concatenated, sliced back into the leaves. One collective per step
instead of one per leaf, as XLA's all-reduce combiner does; each collective on a ring costs
a round of messages whatever its size.

Given / Result:
    %2 = AllReduce[fn=sum] %0 ; %3 = AllReduce[fn=sum] %1          (f32[3], f32[2,2])
    -> %4 = Concat[axis=0] (Reshape %0 to [3]), (Reshape %1 to [4]) ; %5 = AllReduce %4
       %2 = Reshape (Narrow %5 0..3) ; %3 = Reshape (Narrow %5 3..7) to [2,2]
"""
from ...ir.ops import OpKind as K
from ...ir.rewrite import rewrite


def _key(n):
    a = n.attrs
    return (a["fn"], a["axis_name"], a["axis_size"], n.inputs[0].dtype)


def runs(graph):
    """{id(first node): [nodes]}: the runs of two or more top-level AllReduce nodes with one
    key, consecutive but for Constants, none reading another's result."""
    out, run = {}, []

    def close():
        if len(run) > 1:
            out[id(run[0])] = list(run)
        run.clear()
    for n in graph.nodes:
        if n.kind is K.Constant:
            continue
        if n.kind is not K.AllReduce or n.inputs[0].dtype.kind == "b":
            close()
            continue
        produced = {o.id for m in run for o in m.outputs}
        if run and (_key(run[0]) != _key(n) or n.inputs[0].id in produced):
            close()
        run.append(n)
    close()
    return out


def combine_all_reduces(graph):
    """`graph` with each run of AllReduce nodes (see `runs`) done as one AllReduce."""
    found = runs(graph)
    if not found:
        return graph
    pending = {}

    def rule(b, n, ins):
        if id(n) in pending:
            return pending.pop(id(n))
        run = found.get(id(n))
        if run is None:
            return None
        flat = [b.reshape(b.value_of(m.inputs[0]), (m.inputs[0].size,)) for m in run]
        total = b.add(K.AllReduce, (b.add(K.Concat, flat, {"axis": 0}),), dict(n.attrs))
        pieces, start = [], 0
        for m in run:
            size = m.outputs[0].size
            piece = b.add(K.Narrow, (total,), {"axis": 0, "start": start, "length": size})
            pieces.append(b.reshape(piece, m.outputs[0].shape))
            start += size
        pending.update((id(m), v) for m, v in zip(run[1:], pieces[1:]))
        return pieces[0]
    return rewrite(graph, rule, "combining all-reduces")[0]
