"""Recognition of optax's Adam step (`optax.adam(...).update` then `optax.apply_updates`) as
one AdamUpdate node per group of parameter leaves (ir/reference_optim.py).

The pattern is generated like the others (passes/patterns.py): the installed optax's own code
for one leaf, traced with `jax.make_jaxpr` and translated by the frontend, with inputs p, g, mu,
nu, count as wildcards and lr, b1, b2, eps as pattern variables (traced with marker values).
It is matched at each leaf's new parameter p' = p + (-lr)·update, loosely (kinds and
sub-operations) and then exactly: optax re-traced at the leaf's shapes with the bound
hyperparameters must equal the user's subgraph node for node, constants included. A
hyperparameter is read back from its float32 constant as the shortest decimal that rounds to
it (0.9, not 0.8999999761581421), since optax computes 1 - b1 from the Python float; a value
written with more digits than float32 keeps does not match, and is left as it is.

The exact match also finds the leaf's mu', nu' and count' in the user's graph. Leaves with the
same count', hyperparameters and dtype form one group: a single AdamUpdate node replaces all of
their p', mu', nu' and the shared count', emitted where the first of them was (every operand of
the group must exist there, as it does when the update follows the whole gradient). With a
learning-rate schedule (`optax.adam(optax.warmup_cosine_decay_schedule(...))`, any schedule)
optax computes the step size -schedule(count) once per update from the schedule's own count;
that scalar, whatever computes it, becomes the node's operand (lr=None) and the schedule stays
in primitives. Anything else, `eps_root` other than 0, a weight-decay mask, is not this
formula and stays in primitives. `optax.adamw` (its weight decay added to the direction before
the learning rate, mask=None) is the same kind with `weight_decay`.

Leaves may be float32, bfloat16 or float16, and `mu_dtype` may store the first moment in
another float dtype than the parameter's (`optax.adam(lr, mu_dtype=jnp.bfloat16)` over float32
leaves: mu' is computed in float32 and stored rounded); the templates are traced per
(parameter dtype, mu dtype) pair the graph's dtypes allow (`DTYPES`). In a 16-bit leaf's
formula a hyperparameter stands both as a float32 constant (b1 in the bias correction) and as
its 16-bit rounding (b1·mu); each binds on its own and the exact match checks that they are
the one value's roundings. A hyperparameter seen only as a 16-bit constant is read back as the
shortest decimal that rounds to it in that dtype (lr=1e-3 of a bfloat16 leaf: 0.001).
"""
import functools

import numpy as np

from ..ir.ops import OpKind as K
from ..ir.rewrite import dce, rewrite
from .pattern_index import key, variants
from .patterns import Matcher, Reference, is_float, signature, variables

# marker values distinct from each other and from 1 - b1, 1 - b2 in float16 and bfloat16 too
MARKERS = {"nlr": 0.0173, "b1": 0.8765, "b2": 0.98765, "eps": 3.21e-7}
WD_MARKER = {"wd": 0.0345}                      # adamw's weight_decay
F32, BF16, F16 = (np.dtype(d) for d in ("float32", "bfloat16", "float16"))
# (parameter dtype, mu dtype) of the templates: optax.adam's leaves, with mu_dtype or without
DTYPES = ((F32, F32), (BF16, BF16), (F16, F16), (F32, BF16), (F32, F16), (BF16, F32),
          (F16, F32))
SCHEDULED = {k: v for k, v in MARKERS.items() if k != "nlr"}   # the step size is an operand


def _mu_dtype(p, mu):
    return None if mu.dtype == p.dtype else mu.dtype


def _optax_adam_leaf(p, g, mu, nu, count, *, nlr, b1, b2, eps, wd=None):
    """One leaf of optax.adam(-nlr, b1, b2, eps) (optax.adamw(..., weight_decay=wd) when wd is
    given; mu_dtype: mu's dtype where it is not p's) + apply_updates: (p', mu', nu',
    count')."""
    import jax
    import optax
    hyper = {"b1": b1, "b2": b2, "eps": eps, "mu_dtype": _mu_dtype(p, mu)}
    opt = optax.adam(learning_rate=-nlr, **hyper) if wd is None else \
        optax.adamw(learning_rate=-nlr, weight_decay=wd, **hyper)
    state = jax.tree.unflatten(jax.tree.structure(opt.init(p)), [count, mu, nu])
    updates, state = opt.update(g, state, p)
    adam = state[0]
    return optax.apply_updates(p, updates), adam.mu, adam.nu, adam.count


def _optax_adam_schedule_leaf(p, g, mu, nu, count, step, *, b1, b2, eps, wd=None):
    """One leaf of optax.adam(schedule, b1, b2, eps) (optax.adamw(schedule, ...,
    weight_decay=wd) when wd is given) + apply_updates, with `step` the step size optax's
    scale_by_learning_rate computes once per update from the schedule's own count
    (-schedule(count)): (p', mu', nu', count'). Whatever computes the step size, the leaf's
    formula is this one."""
    import jax
    import optax
    parts = [optax.scale_by_adam(b1=b1, b2=b2, eps=eps, mu_dtype=_mu_dtype(p, mu))]
    if wd is not None:
        parts.append(optax.add_decayed_weights(wd))
    opt = optax.chain(*parts, optax.scale_by_schedule(lambda _: step))
    state = jax.tree.unflatten(jax.tree.structure(opt.init(p)), [count, mu, nu, count])
    updates, state = opt.update(g, state, p)
    adam = state[0]
    return optax.apply_updates(p, updates), adam.mu, adam.nu, adam.count


def _example(dtype, scheduled=False):
    def example(rank):
        leaf = ((3,) * rank, dtype)
        out = {"p": leaf, "g": leaf, "mu": leaf, "nu": leaf, "count": ((), np.int32)}
        if scheduled:
            out["step"] = ((), np.float32)
        return out
    return example


def _fill(bound):
    return bound if "count" in bound and "p" in bound else None


_TRIGGER = {(K.Activation, "sqrt"), (K.Binary, "pow")}
ADAMS = tuple(Reference(name, _optax_adam_leaf, ("p", "g", "mu", "nu", "count"),
                        _example(np.float32), fill=_fill, params=params, ranks=(1,),
                        trigger=_TRIGGER)
              for name, params in (("optax.adam + optax.apply_updates", MARKERS),
                                   ("optax.adamw + optax.apply_updates",
                                    {**MARKERS, **WD_MARKER}))) + tuple(
    # a learning-rate schedule (any: optax.warmup_cosine_decay_schedule, ...): the step size
    # is an operand, computed by the user's program from the schedule's count
    Reference(name, _optax_adam_schedule_leaf, ("p", "g", "mu", "nu", "count", "step"),
              _example(np.float32, True), fill=_fill, params=params, ranks=(1,),
              trigger=_TRIGGER)
    for name, params in (("optax.adam(schedule) + optax.apply_updates", SCHEDULED),
                         ("optax.adamw(schedule) + optax.apply_updates",
                          {**SCHEDULED, **WD_MARKER})))


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
    """One exact match: the bound inputs, hyperparameters, and the user's p', mu', nu', count'."""

    def __init__(self, bound, params, outs):
        self.bound, self.params = bound, params
        self.p_new, self.mu_new, self.nu_new, self.count_new = outs

    def key(self):
        step = self.bound["step"].id if "step" in self.bound else None
        return (self.count_new.id, step, tuple(sorted(self.params.items())), self.p_new.dtype,
                self.mu_new.dtype)


def match_leaf(ref, u, template, loose, users=None):
    """The Leaf of reference `ref` whose p' is the user value `u`, or None; users: {value id:
    the user nodes reading it}, where a result p' does not reach (mu' stored in its mu_dtype:
    a Cast of what p' reads) is found."""
    env = loose.value(template.outputs[0], u, {})
    if env is None:
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    if not all(("var", k) in env for k in ref.params):
        return None
    params = {k: decimal(env[("var", k)].attrs["value"]) for k in ref.params}
    types = ref.types(bound)
    if types is None or len({types[i] for i in (0, 1, 3)}) != 1 or \
            types[2][0] != types[0][0] or not all(is_float(t[1]) for t in (types[0], types[2])):
        return None
    exact_graph = ref.graph(types, tuple(sorted(params.items())))
    if exact_graph is None:
        return None
    env = Matcher(True).value(exact_graph.outputs[0], u, {})
    if env is None:
        return None
    bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
    outs = [env.get(o.id) or _reader(o, env, users or {}) for o in exact_graph.outputs]
    if len(bound) != len(ref.inputs):
        return None
    return Leaf(bound, params, outs) if all(o is not None for o in outs) else None


def _reader(o, env, users):
    """The user value matching exact-pattern value `o` whose node reads only matched values,
    among the readers of the first of them, or None."""
    ins = [env.get(v.id) or env.get(("in", v.node.attrs.get("index"))) for v in o.node.inputs]
    if not ins or any(v is None for v in ins):
        return None
    for n in users.get(ins[0].id, ()):
        if len(n.outputs) > o.index and Matcher(True).value(o, n.outputs[o.index], dict(env)):
            return n.outputs[o.index]
    return None


def readers(graph):
    """{value id: the nodes of `graph` reading it}."""
    out = {}
    for n in graph.nodes:
        for v in n.inputs:
            out.setdefault(v.id, []).append(n)
    return out


@functools.lru_cache(maxsize=None)
def _template(ref, p_dtype, mu_dtype):
    """(template, loose matcher) of `ref` at one (parameter dtype, mu dtype), or None."""
    ex = ref.example(1)
    dtypes = {"p": p_dtype, "g": p_dtype, "nu": p_dtype, "mu": mu_dtype}
    template = ref.graph(tuple((tuple(ex[n][0]), dtypes.get(n, np.dtype(ex[n][1])))
                               for n in ref.inputs), tuple(sorted(ref.params.items())))
    if template is None:                     # optax is not installed
        return None
    return template, Matcher(False, variables(template, ref.params))


def _templates(graph):
    """(reference, template, loose matcher) of the Adam references the graph can hold, at the
    (parameter, mu) dtype pairs among its values' dtypes."""
    present = {(n.kind, n.attrs.get("fn")) for n in graph.nodes}
    floats = {F32 if v.dtype == np.float64 else v.dtype       # float64: float32's templates
              for n in graph.nodes for v in n.outputs}
    out = []
    for ref in ADAMS if ref_ok(present) else ():
        for p_dtype, mu_dtype in DTYPES:
            got = {p_dtype, mu_dtype} <= floats and _template(ref, p_dtype, mu_dtype)
            if got:
                out.append((ref,) + got)
    return out


def ref_ok(present):
    """Whether a graph whose (kind, fn) pairs are `present` can hold an Adam step."""
    return _TRIGGER <= present


def find_groups(graph):
    """The groups of matched leaves (lists of Leaf, in graph order) among `graph`'s own nodes."""
    refs = _templates(graph)
    keys = [key(template.outputs[0]) for _, template, _ in refs]
    groups, users = {}, readers(graph) if refs else {}
    for n in graph.nodes if refs else ():
        if len(n.outputs) != 1:
            continue
        have = None                       # what a loose match checks first (pattern_index.py)
        for (ref, template, loose), k in zip(refs, keys):
            if signature(n.out) != signature(template.outputs[0]):
                continue
            have = variants(n.out) if have is None else have
            leaf = k in have and match_leaf(ref, n.out, template, loose, users)
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
    """`graph` with each group of optax Adam leaves replaced by one AdamUpdate node; groups are
    found in each region on its own (value ids are unique across regions)."""
    groups = []
    for g in _graphs(graph):
        found = find_groups(g)
        for leaves in found:
            if "step" in leaves[0].bound:
                hoist_step(g, leaves[0].bound["step"], [
                    v for lf in leaves for v in (lf.p_new, lf.mu_new, lf.nu_new, lf.count_new)])
        groups += found
    if not groups:
        return graph
    slots = {}                                 # user value id -> (group, result index)
    for gi, leaves in enumerate(groups):
        k = len(leaves)
        slots[leaves[0].count_new.id] = (gi, 0)
        for j, leaf in enumerate(leaves):
            for r, v in enumerate((leaf.p_new, leaf.mu_new, leaf.nu_new)):
                slots[v.id] = (gi, 1 + r * k + j)
    def adam_node(gi):
        leaves = groups[gi]
        scheduled = "step" in leaves[0].bound
        olds = [leaves[0].bound["count"]] + ([leaves[0].bound["step"]] if scheduled else [])
        olds += [lf.bound[name] for name in ("p", "g", "mu", "nu") for lf in leaves]
        p = leaves[0].params
        return K.AdamUpdate, olds, {
            "lr": None if scheduled else -p["nlr"], "b1": p["b1"], "b2": p["b2"],
            "eps": p["eps"], "eps_root": 0.0, "weight_decay": p.get("wd", 0.0)}
    return replace_groups(graph, slots, adam_node)


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
