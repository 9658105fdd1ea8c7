"""Recognition of optax's update steps (`opt.update` then `optax.apply_updates`) as one node
per group of parameter leaves: Adam's as AdamUpdate (ir/reference_optim.py), Lion's as
LionUpdate (ir/reference_optim.py); the formulas are listed in passes/optim_refs.py.

The pattern is generated like the others (passes/patterns.py): the installed optax's own code
for one leaf, traced with `jax.make_jaxpr` and translated by the frontend, with inputs p, g,
the leaf's state (mu, nu) and count as wildcards and the hyperparameters (lr, b1, b2, eps,
weight_decay) as pattern variables (traced with marker values). It is matched at each leaf's
new parameter p', loosely (kinds and sub-operations) and then exactly: optax re-traced at the
leaf's shapes with the bound hyperparameters must equal the user's subgraph node for node,
constants included. A hyperparameter is read back from its constant as the shortest decimal
that rounds to it (0.9, not 0.8999999761581421), since optax computes 1 - b1 from the Python
float; a value written with more digits than float32 keeps does not match, and is left as it is.

The exact match also finds the leaf's new state and count' in the user's graph (Lion's count
enters no formula: its increment stays primitives, and the node neither takes nor yields it).
Leaves with the same count', hyperparameters and dtypes form one group: a single node replaces
all of their p', state' and the shared count', emitted where the first of them was (every
operand of the group must exist there, as it does when the update follows the whole
gradient). With a learning-rate schedule (`optax.adam(warmup_cosine_decay_schedule(...))`,
any schedule) optax computes the step size -schedule(count) once per update from the
schedule's own count; that scalar, whatever computes it, becomes the node's operand (lr=None)
and the schedule stays in primitives. Anything else (Adam's `eps_root` other than 0, a weight-decay mask, Lion's
"smooth" or "refined" modes) is not the formula and stays in primitives.

Leaves may be float32, bfloat16 or float16, and `mu_dtype` may store the first moment in
another float dtype than the parameter's (`optax.adam(lr, mu_dtype=jnp.bfloat16)` over float32
leaves: mu' is computed in float32 and stored rounded); the templates are traced per
(parameter dtype, mu dtype) pair the graph's dtypes allow (optim_refs.DTYPES). In a 16-bit
leaf's formula a hyperparameter stands both as a float32 constant (b1 in Adam's bias
correction) and as its 16-bit rounding (b1·mu); each binds on its own and the exact match
checks that they are the one value's roundings. A hyperparameter seen only as a 16-bit
constant is read back as the shortest decimal that rounds to it in that dtype (lr=1e-3 of a
bfloat16 leaf: 0.001).
"""
import functools

import numpy as np

from ..ir.rewrite import dce, rewrite
from .pattern_index import key, variants
from .optim_refs import DTYPES, F32, OPTIMIZERS
from .patterns import Matcher, is_float, signature, variables

def decimal(value):
    """The shortest decimal that rounds to `value` in its own float dtype (float32 if it has
    none), as a Python float."""
    value = np.asarray(value, value.dtype if hasattr(value, "dtype") else np.float32)
    for digits in range(1, 18):
        got = float(f"{float(value):.{digits}g}")
        if np.asarray(got, value.dtype) == value:
            return got
    return float(value)


class Leaf:
    """One exact match of optimizer `opt`: the bound inputs, hyperparameters, and the user's
    p', new state (mu', [nu']) and count'."""

    def __init__(self, opt, bound, params, outs):
        self.opt, self.bound, self.params = opt, bound, params
        self.count_new = outs[-1] if opt.counted else None
        self.p_new, self.states = outs[0], tuple(outs[1:len(outs) - opt.counted])

    def key(self):
        step = self.bound["step"].id if "step" in self.bound else None
        count = self.count_new.id if self.count_new is not None else None
        return (self.opt.kind, count, step, tuple(sorted(self.params.items())),
                self.p_new.dtype, self.states[0].dtype)

    def results(self):
        """The user values the node replaces: p' and the new states (and count' first)."""
        return (self.count_new,) * self.opt.counted + (self.p_new,) + self.states


def match_leaf(opt, ref, u, template, loose, users=None):
    """The Leaf of `opt`'s reference `ref` whose p' is the user value `u`, or None. users:
    {value id: the user nodes reading it}, among which the results p' does not reach (Lion's
    mu', a mu' stored in its mu_dtype) are found (`_extend`)."""
    users = users or {}
    env = _extend(loose, template.outputs, loose.value(template.outputs[0], u, {}), users)
    if env is None:
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    if not all(("var", k) in env for k in ref.params):
        return None
    params = {k: decimal(env[("var", k)].attrs["value"]) for k in ref.params}
    types = ref.types(bound)
    if types is None or not _leaf_types(dict(zip(ref.inputs, types))):
        return None
    exact_graph = ref.graph(types, tuple(sorted(params.items())))
    if exact_graph is None:
        return None
    exact = Matcher(True)
    env = _extend(exact, exact_graph.outputs, exact.value(exact_graph.outputs[0], u, {}),
                  users)
    if env is None:
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    if len(bound) != len(ref.inputs):
        return None
    return Leaf(opt, bound, params, [env[o.id] for o in exact_graph.outputs])


def _extend(matcher, outputs, env, users, depth=4):
    """`env` (a match of outputs[0]) extended with a match of each other output, searched
    among the user values at most `depth` nodes downstream of the values matched so far; None
    where one has none."""
    for o in outputs[1:] if env is not None else ():
        if o.id in env:
            continue
        start = [v for k, v in env.items() if not (isinstance(k, tuple) and k[0] == "var")]
        env = next((got for v in _downstream(start, users, depth)
                    if (got := matcher.value(o, v, dict(env))) is not None), None)
    return env


def _downstream(start, users, depth):
    """The user values computed from `start` by at most `depth` nodes, nearest first."""
    seen, frontier = set(), start
    for _ in range(depth):
        nxt = []
        for v in frontier:
            for n in users.get(v.id, ()):
                if id(n) not in seen:
                    seen.add(id(n))
                    nxt += n.outputs
        yield from nxt
        frontier = nxt


def _leaf_types(types):
    """Whether {input: (shape, dtype)} is a leaf: p, g and the states of one shape and float
    dtype, but mu of any float dtype."""
    p = types["p"]
    return is_float(p[1]) and is_float(types["mu"][1]) and types["mu"][0] == p[0] and all(
        t == p for n, t in types.items() if n not in ("mu", "count", "step"))


@functools.lru_cache(maxsize=None)
def _template(ref, p_dtype, mu_dtype):
    """(template, loose matcher) of `ref` at one (parameter dtype, mu dtype), or None."""
    ex = ref.example(1)
    dtypes = {"count": np.dtype(np.int32), "step": F32, "mu": mu_dtype}
    template = ref.graph(tuple((tuple(ex[n][0]), dtypes.get(n, p_dtype)) for n in ref.inputs),
                         tuple(sorted(ref.params.items())))
    if template is None:                     # optax is not installed
        return None
    return template, Matcher(False, variables(template, ref.params))


def _templates(graph):
    """(optimizer, reference, template, loose matcher) of the references the graph can hold
    (by their trigger), at the (parameter, mu) dtype pairs among its values' dtypes."""
    present = {(n.kind, n.attrs.get("fn")) for n in graph.nodes}
    floats = {F32 if v.dtype == np.float64 else v.dtype       # float64: float32's templates
              for n in graph.nodes for v in n.outputs}
    out = []
    for opt in OPTIMIZERS:
        for ref in opt.refs if opt.refs[0].trigger <= present else ():
            for p_dtype, mu_dtype in DTYPES:
                got = {p_dtype, mu_dtype} <= floats and _template(ref, p_dtype, mu_dtype)
                if got:
                    out.append((opt, ref) + got)
    return out


def find_groups(graph):
    """The groups of matched leaves (lists of Leaf, in graph order) among `graph`'s own nodes."""
    refs = _templates(graph)
    keys = [key(template.outputs[0]) for _, _, template, _ in refs]
    groups, users = {}, graph.readers() if refs else {}
    for n in graph.nodes if refs else ():
        if len(n.outputs) != 1:
            continue
        have = None                       # what a loose match checks first (pattern_index.py)
        for (opt, ref, template, loose), k in zip(refs, keys):
            if signature(n.out) != signature(template.outputs[0]):
                continue
            have = variants(n.out) if have is None else have
            leaf = k in have and match_leaf(opt, ref, n.out, template, loose, users)
            if leaf:
                groups.setdefault(leaf.key(), []).append(leaf)
                break
    return list(groups.values())


def _graphs(graph):
    """`graph` and every region in it, nested ones too (a training loop's body)."""
    yield graph
    for n in graph.nodes:
        for r in n.regions:
            yield from _graphs(r)


def hoist_step(g, step, outs):
    """Moves the computation of a scheduled group's step size (the schedule, from its own
    count) before the group's first result (of `outs`) in `g`'s node order, where the update
    node will stand, when it depends on nothing computed after that point (the schedule reads
    only its count): the order of independent nodes does not change what the graph computes."""
    pos = {id(n): i for i, n in enumerate(g.nodes)}
    if step.node is None or id(step.node) not in pos or any(id(v.node) not in pos
                                                             for v in outs):
        return
    first = min(pos[id(v.node)] for v in outs)
    if pos[id(step.node)] < first:
        return
    cone, todo = set(), [step.node]
    while todo:
        n = todo.pop()
        if id(n) in cone or pos.get(id(n), -1) < first:
            continue
        if id(n) not in pos or n in {v.node for v in outs}:
            return                       # computed elsewhere, or from the group's results
        cone.add(id(n))
        todo.extend(v.node for v in n.inputs if v.node is not None)
    moved = [n for n in g.nodes[first:] if id(n) in cone]
    g.nodes[first:] = moved + [n for n in g.nodes[first:] if id(n) not in cone]


def recognize_optimizers(graph):
    """`graph` with each group of optax Adam (Lion) leaves replaced by one AdamUpdate
    (LionUpdate) node; groups are found in each region on its own (value ids are unique
    across regions)."""
    groups = []
    for g in _graphs(graph):
        found = find_groups(g)
        for leaves in found:
            if "step" in leaves[0].bound:
                hoist_step(g, leaves[0].bound["step"],
                           [v for lf in leaves for v in lf.results()])
        groups += found
    if not groups:
        return graph
    slots = {}                                 # user value id -> (group, result index)
    for gi, leaves in enumerate(groups):
        k, first = len(leaves), int(leaves[0].opt.counted)
        if first:
            slots[leaves[0].count_new.id] = (gi, 0)
        for j, leaf in enumerate(leaves):
            for r, v in enumerate(leaf.results()[first:]):
                slots[v.id] = (gi, first + r * k + j)

    def update_node(gi):
        leaves = groups[gi]
        opt, scheduled = leaves[0].opt, "step" in leaves[0].bound
        olds = [leaves[0].bound[n] for n in ("count", "step") if n in leaves[0].bound]
        olds += [lf.bound[name] for name in ("p", "g") + opt.states for lf in leaves]
        return opt.kind, olds, opt.attrs(leaves[0].params, scheduled)
    return replace_groups(graph, slots, update_node)


def replace_groups(graph, slots, node_of):
    """`graph` with the values of `slots` ({user value id: (group, result index)}) replaced by
    the results of one node per group, `node_of(group) -> (kind, user operands, attrs)`,
    emitted where the group's first result was; a group with an operand computed later is
    left as it is."""
    made, refused = {}, set()

    def replace(b, n, ins):
        if len(n.outputs) != 1 or n.out.id not in slots:
            return None
        gi, index = slots[n.out.id]
        if gi in refused:
            return None
        if gi not in made:
            kind, olds, attrs = node_of(gi)
            try:
                operands = [b.value_of(v) for v in olds]
            except KeyError:                   # an operand is computed later: leave the group
                refused.add(gi)
                return None
            made[gi] = b.add(kind, operands, attrs)
        return made[gi][index]
    new, count = rewrite(graph, replace, "recognising optimizer updates")
    return dce(new).verify() if count else graph
