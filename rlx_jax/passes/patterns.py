"""A generic subgraph matcher for patterns GENERATED from reference formulas.

A `Reference` is a jnp function (jax.nn.softmax, a flax module's apply, the joint forward and
backward of `jax.vjp`, ...) with named array inputs and scalar parameters. It is traced with
`jax.make_jaxpr` and translated by the frontend (`graph_from_jaxpr`) into an IR graph at the
shapes asked for, so a pattern is exactly what the frontend emits for that formula at the
installed library versions; nothing is written by hand. A `Pattern` is one output of a reference
and a replacement (the high-level kind with its operands and attributes).

Matching a pattern at a node of the user's graph takes two steps:

1. structural: the template (the reference traced at example shapes) is matched against the
   user's subgraph ending at the node, comparing node kinds, their sub-operation (`fn`), arity
   and output index, never shapes or other attributes. Reference inputs are wildcards bound to
   the user's values; a parameter (eps, scale) is a pattern variable: traced with a marker
   value, its Constant binds to the user's Constant. Commutative operands (add, mul, max, min,
   eq, ne) match in either order.
2. exact: the reference is traced again at the bound inputs' shapes and dtypes with the bound
   parameter values, and compared node by node with the user's subgraph: kinds, every
   attribute, shapes, dtypes and constant values. Only an exact match fires. A parameter that
   is neither a shape nor a scalar marker (softmax's axis, GroupNorm's group count) is derived
   from the user's values the loose match bound (`Reference.derive`) and re-traced likewise.

An output that is a sum (a Binary add) is matched as an n-ary sum: JAX accumulates a value's
cotangent contributions in the order its uses are transposed, so the terms of the reference's
gradient may be interleaved with the user's other contributions (a residual branch). The
pattern's terms must be among the user's sum's terms; the others are added to the replacement.
Sums already replaced are not looked into, so each accumulation is claimed once.

Every template is generated per float dtype (`VARIANTS`): the reference is traced with its
float32 example inputs as float32, bfloat16 or float16, and, for a reference with `weights` (a
layer's parameters), with the activations in bfloat16 / float16 and the weights in float32 (flax's
`dtype=bf16, param_dtype=float32`). JAX computes a 16-bit formula's statistics in float32 (a
jnp.sum of a bfloat16 array accumulates in float32), so each dtype has a structure of its own.
The loose match compares dtype classes (`dclass`: float32 and float64 one class, bfloat16 and
float16 one each), so a node is offered only the templates of its own dtypes. A match reports
the widest float dtype its formula computes in (`compute_dtype`), at which the replacement runs.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..frontend.trace import graph_from_jaxpr
from ..ir.ops import OpKind as K
from . import template_cache

F32, BF16, F16 = (np.dtype(d) for d in (np.float32, jnp.bfloat16, np.float16))
# (activation dtype, weight dtype) of the templates: the example's float32 inputs become these
VARIANTS = ((F32, F32), (BF16, BF16), (F16, F16), (BF16, F32), (F16, F32))
COMMUTATIVE = {(K.Binary, f) for f in ("add", "mul", "max", "min")} | \
    {(K.Compare, f) for f in ("eq", "ne")}
MAX_TERMS = 64


class Reference:
    """A reference formula: `fn(*inputs, **params)` returns a tuple of arrays.

    inputs: the names of fn's array arguments; example(rank): {name: (shape, dtype)} at which
    the template of that rank is traced; fill(bound): the shapes and dtypes of every input from
    those of the bound ones (by default every input must be bound); params: {name: marker},
    the scalar parameters, traced with their marker in the template; ranks: the template
    ranks; trigger: (kind, fn) pairs every graph the formula can occur in contains (a cheap
    test before any template is traced); derive(template, user): {name: value} of the
    parameters read off the user's subgraph (user(v): the user value the loose match bound to
    template value v, or None), or None to decline; the template is traced with fn's
    defaults for them. `name` identifies the formula (the traced graphs are cached on disk
    under it, passes/template_cache.py): no two references share one. weights: the inputs
    that are a layer's parameters (float32 in the mixed VARIANTS)."""

    def __init__(self, name, fn, inputs, example, *, fill=None, params=None, ranks=(2, 3),
                 trigger=(), derive=None, weights=()):
        self.name, self.fn, self.inputs = name, fn, tuple(inputs)
        self.weights = tuple(w for w in weights if w in self.inputs)
        self.example, self.fill = example, fill
        self.params = dict(params or {})
        self.ranks, self.trigger = tuple(ranks), frozenset(trigger)
        self.derive = derive

    @functools.lru_cache(maxsize=256)
    def graph(self, types, params):
        """The reference traced at `types` (((shape, dtype) per input)) with `params`
        (sorted (name, value) pairs); None where the formula refuses those shapes."""
        key = (self.name, self.inputs, types, params)
        got = template_cache.load(key)       # traced by an earlier process (template_cache.py)
        if got is template_cache.MISSING:
            got = self.trace(types, params)
            if got is not None:              # a refusal may be an import blocked in this process
                template_cache.store(key, got)
        return got

    def trace(self, types, params):
        """The reference traced at `types` with `params`, not looked up in any cache."""
        structs = [jax.ShapeDtypeStruct(s, d) for s, d in types]
        fn = functools.partial(self.fn, **dict(params))
        try:
            closed = jax.make_jaxpr(fn)(*structs)
        except Exception:  # noqa: BLE001 - a loose match at impossible shapes does not match
            return None
        return graph_from_jaxpr(closed, name=self.name, host=False)

    def variants(self):
        """The (activation, weight) dtypes of VARIANTS this reference is traced at."""
        return tuple(v for v in VARIANTS if v[0] == v[1] or self.weights)

    def _dtype(self, name, dtype, variant):
        if np.dtype(dtype) != F32:
            return np.dtype(dtype)
        return variant[1] if name in self.weights else variant[0]

    @functools.lru_cache(maxsize=None)
    def template(self, rank, variant=VARIANTS[0]):
        """The template of `rank` with the example's float32 inputs at `variant`'s dtypes."""
        ex = self.example(rank)
        return self.graph(tuple((tuple(ex[n][0]), self._dtype(n, ex[n][1], variant))
                                for n in self.inputs), tuple(sorted(self.params.items())))

    def types(self, bound, variant=VARIANTS[0]):
        """((shape, dtype) per input) from the bound inputs' values, or None; an unbound weight
        of a mixed variant is float32."""
        got = {n: (v.shape, v.dtype) for n, v in bound.items()}
        if self.fill is not None and len(got) < len(self.inputs):
            got = self.fill(got)
        if got is None or any(n not in got for n in self.inputs):
            return None
        mixed = variant[0] != variant[1]
        return tuple((tuple(got[n][0]), variant[1] if mixed and n in self.weights and
                      n not in bound else np.dtype(got[n][1])) for n in self.inputs)


class Pattern:
    """Output `out` of reference `ref`, replaced by `replace(b, ops, params, root)`: ops are
    the bound inputs (new-graph values, by name), params the bound parameter values, root the
    user's value being replaced; it returns a value of root's type, or None to decline."""

    def __init__(self, ref, out, replace):
        self.ref, self.out, self.replace = ref, out, replace
        self.name = f"{ref.name}[{out}]"


def dclass(dtype):
    """What the loose match compares of a dtype: its kind, bfloat16 and float16 apart."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype in (BF16, F16) else dtype.kind


def is_float(dtype):
    return jnp.issubdtype(dtype, jnp.floating)


def compute_dtype(graph):
    """The widest float dtype of `graph`'s values (None without floats): a bfloat16 formula
    whose statistics JAX accumulates in float32 computes in float32."""
    got = {v.dtype for n in graph.nodes for v in n.outputs if is_float(v.dtype)}
    return max(got, key=lambda d: (d.itemsize, d == F32), default=None)


def signature(v):
    """What a root is indexed by: the producing node's kind and sub-operation."""
    return v.node.kind, v.node.attrs.get("fn")


def is_sum(v):
    return v.node is not None and v.node.kind is K.Binary and v.node.attrs.get("fn") == "add"


def terms(v, stop=frozenset()):
    """The terms of the add tree rooted at `v` (adds of v's own type, not in `stop`)."""
    out, todo = [], [v]
    while todo and len(out) + len(todo) <= MAX_TERMS:
        t = todo.pop()
        if is_sum(t) and t.node not in stop and all(
                (i.shape, i.dtype) == (v.shape, v.dtype) for i in t.node.inputs):
            todo.extend(reversed(t.node.inputs))
        else:
            out.append(t)
    return out + todo[::-1]


def _same_attr(x, y):
    """Attribute equality; NaNs (a gather's fill_value) equal NaNs."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(
            x, y, equal_nan=x.dtype.kind in "c" or is_float(x.dtype))
    try:
        return bool(x == y) or (isinstance(x, float) and isinstance(y, float) and x != x
                                and y != y)
    except (TypeError, ValueError):
        return False


class Matcher:
    """Matches pattern values against user values. `exact` compares everything; otherwise
    kinds, sub-operations, arity and dtype classes only (see the module doc). `variables` maps
    a pattern Constant node to the name of the parameter it stands for. The environment maps
    pattern value ids to user values, ("in", i) to the value bound to input i and ("var",
    name) to a parameter's user Constant; a call may extend the dict it is handed, so callers
    that retry pass copies."""

    def __init__(self, exact, variables=None):
        self.exact, self.variables = exact, variables or {}

    def _types(self, p, u):
        if self.exact:
            return (p.shape, p.dtype) == (u.shape, u.dtype)
        return dclass(p.dtype) == dclass(u.dtype)

    def value(self, p, u, env):
        pn, un = p.node, u.node
        if pn.kind is K.Input:
            key = ("in", pn.attrs["index"])
            if key in env:
                return env if env[key] is u else None
            if not self._types(p, u):
                return None
            env[key] = u
            return env
        if un is None or un.kind is not pn.kind or p.index != u.index or not self._types(p, u):
            return None
        if pn.kind is K.Constant:
            return self._constant(pn, un, env)
        if p.id in env:
            return env if env[p.id] is u else None
        if len(pn.inputs) != len(un.inputs) or pn.attrs.keys() != un.attrs.keys():
            return None
        if self.exact:
            if not all(_same_attr(pn.attrs[k], un.attrs[k]) for k in pn.attrs):
                return None
        elif pn.attrs.get("fn") != un.attrs.get("fn"):
            return None
        env[p.id] = u
        if (pn.kind, pn.attrs.get("fn")) in COMMUTATIVE:
            (a, c), (x, y) = pn.inputs, un.inputs
            got = self._pairs(((a, x), (c, y)), dict(env))
            return got if got is not None else self._pairs(((a, y), (c, x)), env)
        return self._pairs(zip(pn.inputs, un.inputs), env)

    def _pairs(self, pairs, env):
        for p, u in pairs:
            env = self.value(p, u, env)
            if env is None:
                return None
        return env

    def _constant(self, pn, un, env):
        name = self.variables.get(pn)
        value = un.attrs["value"]
        if name is not None:
            if value.shape != ():
                return None
            return _bind_variable(env, name, un)
        if self.exact and not _same_attr(pn.attrs["value"], value):
            return None
        return env

    def sum(self, pterms, uterms, env, used=()):
        """Matches every pattern term with a distinct user term; returns (env, used indices)."""
        if not pterms:
            return env, used
        for i, u in enumerate(uterms):
            if i in used:
                continue
            got = self.value(pterms[0], u, dict(env))
            if got is not None:
                res = self.sum(pterms[1:], uterms, got, used + (i,))
                if res is not None:
                    return res
        return None

    def root(self, p, u, stop, pterms=None, uterms=None):
        """Matches pattern root `p` at user value `u`; returns (env, the user terms left over).
        pterms, uterms: the terms of p and u when they are sums, if known."""
        if not is_sum(p):
            env = self.value(p, u, {})
            return (env, []) if env is not None else None
        if not is_sum(u):
            return None
        ut = uterms if uterms is not None else terms(u, stop)
        got = self.sum(pterms if pterms is not None else terms(p), ut, {})
        if got is None:
            return None
        env, used = got
        return env, [t for i, t in enumerate(ut) if i not in used]


def variables(graph, params):
    """{Constant node: parameter name} for the 0-d Constants holding a parameter's marker."""
    out = {}
    for n in graph.nodes:
        if n.kind is not K.Constant or n.attrs["value"].shape != ():
            continue
        for name, marker in params.items():
            v = n.attrs["value"]
            if is_float(v.dtype) and v == np.asarray(marker, v.dtype):
                out[n] = name
    return out


def _bind_variable(env, name, un):
    """`env` with parameter `name` bound to user Constant `un`, or None where it disagrees.
    A parameter may stand in a formula at two dtypes (a 16-bit formula's float32 statistics
    and its rounded 16-bit constant: optax's b1 in a bfloat16 Adam step); each dtype binds on
    its own, ("var", name, dtype), and ("var", name) is the widest, from which the value is
    read back (the exact match then checks that the others are its roundings)."""
    dtype = np.dtype(un.attrs["value"].dtype)
    key = ("var", name, dtype.name)
    if key in env:
        return env if _same_attr(env[key].attrs["value"], un.attrs["value"]) else None
    env[key] = un
    widest = env.get(("var", name))
    if widest is None or np.dtype(widest.attrs["value"].dtype).itemsize < dtype.itemsize:
        env[("var", name)] = un
    return env


def _bound_to(env, v):
    """The user value a loose match bound to template value v (None if none)."""
    if v.node.kind is K.Input:
        return env.get(("in", v.node.attrs["index"]))
    return env.get(v.id)


@functools.lru_cache(maxsize=None)
def _loose(pattern, rank, variant):
    """(template root, its matcher, its sum's terms or None) of `pattern` at `rank`."""
    t = pattern.ref.template(rank, variant)
    p = t.outputs[pattern.out]
    return p, Matcher(False, variables(t, pattern.ref.params)), terms(p) if is_sum(p) else None


def match(pattern, u, stop, uterms=None, ranks=None):
    """(bound inputs {name: user value}, params {name: value}, leftover terms, the formula's
    compute_dtype) when `pattern` matches exactly at user value `u`, else None. `uterms`:
    terms(u, stop), if known; `ranks`: the (rank, variant) templates to try (default: every
    rank at every variant, in order)."""
    ref = pattern.ref
    tried = ranks if ranks is not None else [
        (r, v) for r in ref.ranks for v in ref.variants()]
    for rank, variant in tried:
        if ref.template(rank, variant) is None:
            continue
        p, loose, pterms = _loose(pattern, rank, variant)
        if signature(p) != signature(u):
            continue
        got = loose.root(p, u, stop, pterms, uterms)
        if got is None:
            continue
        env = got[0]
        bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
        params = {k: env[("var", k)].attrs["value"].item() for k in ref.params
                  if ("var", k) in env}
        if len(params) != len(ref.params):
            continue
        if ref.derive is not None:
            more = ref.derive(ref.template(rank, variant), functools.partial(_bound_to, env))
            if more is None:
                continue
            params = {**params, **more}
        types = ref.types(bound, variant)
        if types is None:
            continue
        g = ref.graph(types, tuple(sorted(params.items())))
        exact = g and Matcher(True).root(g.outputs[pattern.out], u, stop, uterms=uterms)
        if exact is None or exact is False:
            continue
        env, rest = exact
        bound = {n: env[("in", i)] for i, n in enumerate(ref.inputs) if ("in", i) in env}
        return bound, params, rest, compute_dtype(g)
    return None
