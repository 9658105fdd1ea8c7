"""Recognition of optax's SGD step with momentum (`optax.sgd(lr, momentum, nesterov).update`
then `optax.apply_updates`) as one SgdMomentumUpdate node per group of parameter leaves
(ir/reference_sgd.py), as passes/recognize_optim.py recognises Adam's.

The pattern is the installed optax's own code for one leaf, traced and translated by the
frontend, with p, g and the trace t as wildcards and -lr and the momentum as pattern variables
(traced with marker values); with a learning-rate schedule the step size -schedule(count) is an
input (the schedule and its count stay primitives). It is matched at each leaf's new parameter
p' loosely, then exactly: optax re-traced at the leaf's shapes with the bound hyperparameters
(read back as the shortest decimal that rounds to the float32 constant) must equal the user's
subgraph, which also yields the leaf's new trace t'. Leaves with the same hyperparameters, step
size and dtype form one group, replaced by one node emitted where the first of its results
was (a group whose operands are not all computed by then is left alone). float32 leaves only
(a 16-bit leaf's momentum constant is rounded to its dtype); `optax.sgd` without momentum has
no trace (p + (-lr)·g stays two primitives).
"""
import numpy as np

from ..ir.ops import OpKind as K
from .patterns import Matcher, Reference, signature, variables
from .recognize_optim import decimal, hoist_step, replace_groups

MARKERS = {"nlr": 0.0123, "m": 0.8765}
SCHEDULED = {"m": 0.8765}


def _leaf(p, g, t, *step, nlr=None, m, nesterov):
    """One leaf of optax.sgd(-nlr, m, nesterov) (with a schedule whose step size is `step`)
    + apply_updates: (p', t')."""
    import jax
    import optax
    if step:
        opt = optax.chain(optax.trace(decay=m, nesterov=nesterov),
                          optax.scale_by_schedule(lambda _: step[0]))
        leaves = [t, np.int32(0)]
    else:
        opt, leaves = optax.sgd(learning_rate=-nlr, momentum=m, nesterov=nesterov), [t]
    state = jax.tree.unflatten(jax.tree.structure(opt.init(p)), leaves)
    updates, state = opt.update(g, state, p)
    return optax.apply_updates(p, updates), state[0].trace


def _nesterov(flag):
    def leaf(p, g, t, *step, **params):
        return _leaf(p, g, t, *step, nesterov=flag, **params)
    return leaf


def _example(scheduled):
    def example(rank):
        leaf = ((3,) * rank, np.float32)
        return {"p": leaf, "g": leaf, "t": leaf, **({"step": ((), np.float32)} if scheduled
                                                     else {})}
    return example


REFS = tuple(   # (reference, nesterov)
    (Reference(f"optax.sgd({'schedule' if sched else 'lr'}, momentum"
               f"{', nesterov' if nest else ''}) + optax.apply_updates", _nesterov(nest),
               ("p", "g", "t") + (("step",) if sched else ()), _example(sched),
               params=SCHEDULED if sched else MARKERS, ranks=(1,),
               trigger={(K.Binary, "mul"), (K.Binary, "add")}), nest)
    for sched in (False, True) for nest in (True, False))


def _match(ref, nesterov, u, template, loose):
    """(group key, bound inputs, (p', t'), the ids of the other user values it covers) of the
    leaf whose p' is user value `u`, or None."""
    env = loose.value(template.outputs[0], u, {})
    if env is None or not all(("var", k) in env for k in ref.params):
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    params = {k: decimal(env[("var", k)].attrs["value"]) for k in ref.params}
    types = ref.types(bound)
    if types is None or any(t != (types[0][0], np.dtype(np.float32)) for t in types[:3]):
        return None
    exact = ref.graph(types, tuple(sorted(params.items())))
    env = exact and Matcher(True).value(exact.outputs[0], u, {})
    if not env:
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    outs = [env.get(o.id) for o in exact.outputs]
    if len(bound) != len(ref.inputs) or any(o is None for o in outs):
        return None
    step = bound["step"].id if "step" in bound else None
    attrs = {"lr": -params["nlr"] if "nlr" in params else None, "momentum": params["m"],
             "nesterov": nesterov}
    inner = {v.id for k, v in env.items() if not isinstance(k, tuple)} - {outs[0].id}
    return (step, tuple(sorted(attrs.items()))), bound, outs, inner


def _regions(graph):
    yield graph
    for n in graph.nodes:
        for r in n.regions:
            yield from _regions(r)


def _kept(g):
    """The ids of `g`'s values used more than once or returned (a program keeps a trace)."""
    uses = {}
    for n in g.nodes:
        for v in n.inputs:
            uses[v.id] = uses.get(v.id, 0) + 1
    return {i for i, c in uses.items() if c > 1} | {v.id for v in g.outputs}


def find_groups(graph):
    """{group key: [(bound, (p', t'))]} of the matched leaves of `graph`'s regions: a leaf's
    trace t' is kept by the program (used beyond p' or returned), and a match inside another
    (the plain formula within nesterov's) is dropped."""
    present = {(n.kind, n.attrs.get("fn")) for g in _regions(graph) for n in g.nodes}
    refs = [(ref, nest, ref.template(1)) for ref, nest in REFS if ref.trigger <= present]
    refs = [(r, nest, t, Matcher(False, variables(t, r.params))) for r, nest, t in refs
            if t is not None]                       # None: optax is not installed
    found = []
    for g in _regions(graph) if refs else ():
        kept = _kept(g)
        for n in g.nodes:
            if len(n.outputs) != 1:
                continue
            for ref, nest, template, loose in refs:
                got = signature(n.out) == signature(template.outputs[0]) and \
                    _match(ref, nest, n.out, template, loose)
                if got and got[2][1].id in kept:
                    found.append(got + (g,))
                    break
    inside = set().union(*(got[3] for got in found))     # (value ids: unique across regions)
    groups = {}
    for key, bound, outs, _, g in found:
        if outs[0].id not in inside:
            groups.setdefault(key, []).append((bound, outs, g))
    for leaves in groups.values():             # a schedule's step size before the node
        if "step" in leaves[0][0]:
            hoist_step(leaves[0][2], leaves[0][0]["step"], [v for _, outs, _ in leaves
                                                              for v in outs])
    return {key: [leaf[:2] for leaf in leaves] for key, leaves in groups.items()}


def recognize_sgd(graph):
    """`graph` with each group of optax SGD-with-momentum leaves replaced by one
    SgdMomentumUpdate node."""
    groups = list(find_groups(graph).items())
    slots = {}                                 # user value id -> (group, result index)
    for gi, (_, leaves) in enumerate(groups):
        for j, (_, outs) in enumerate(leaves):
            for r, v in enumerate(outs):
                slots.setdefault(v.id, (gi, r * len(leaves) + j))
    if not slots:
        return graph

    def sgd_node(gi):
        (step, attrs), leaves = groups[gi]
        olds = [leaves[0][0]["step"]] if step is not None else []
        olds += [bound[name] for name in ("p", "g", "t") for bound, _ in leaves]
        return K.SgdMomentumUpdate, olds, dict(attrs)
    return replace_groups(graph, slots, sgd_node)
