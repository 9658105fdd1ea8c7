"""A graph with symbolic dimensions at one concrete size: `instantiate(graph, env)` copies it
with every value's shape and every shape-carrying attribute evaluated (ir/dims.py) and every
DimSize node (a symbolic dimension's value used as data) a Constant, so backends only ever see
static graphs. `bind` finds the sizes (`env`) of one call from its arguments' shapes and checks
them against the symbolic shapes and their constraints before anything runs."""
import numpy as np

from ..errors import ShapeConstraintError, SymbolicShapeError
from . import dims
from .graph import Graph, Node, Value
from .ops import OpKind


def is_symbolic(graph):
    """Whether any input or node of `graph` (regions included) has a symbolic dimension."""
    return any(dims.symbolic_shape(o.shape) for n in graph.walk() for o in n.outputs)


def instantiate(graph, env):
    """The static copy of `graph` at sizes `env` (symbol name -> int)."""
    new = graph.like()
    vmap = {}
    for n in graph.nodes:
        _copy(n, new, vmap, env)
    new.inputs = [vmap[v.id] for v in graph.inputs]
    new.outputs = [vmap[v.id] for v in graph.outputs]
    return new


def _copy(node, new, vmap, env):
    if node.kind is OpKind.DimSize:
        dtype = node.outputs[0].dtype
        kind, attrs = OpKind.Constant, {
            "value": np.asarray(dims.evaluate(node.attrs["dim"], env), dtype=dtype)}
    else:
        kind, attrs = node.kind, {k: _attr(node, k, v, env) for k, v in node.attrs.items()}
    regions = tuple(instantiate(r, env) for r in node.regions)
    copy = Node(kind, [vmap[v.id] for v in node.inputs], attrs, node.src, regions)
    copy.outputs = tuple(Value([dims.evaluate(d, env) for d in o.shape], o.dtype, copy, o.index)
                         for o in node.outputs)
    for o, c in zip(node.outputs, copy.outputs):
        vmap[o.id] = c
    new.nodes.append(copy)


def _attr(node, key, value, env):
    if node.kind is OpKind.HostPrimitive and key == "params" and _host_symbolic(node):
        raise SymbolicShapeError(
            f"{node.attrs['primitive']} at {node.src or 'an unknown line'} runs on the host as "
            f"JAX's primitive with symbolic dimensions in its parameters, which rlx_jax cannot "
            f"instantiate; trace the function with static shapes (no polymorphic_shapes)")
    return dims.substitute(value, env)


def _host_symbolic(node):
    params = getattr(node.attrs["params"], "params", None) or {}
    return any(dims.mentions_symbol(v) for v in params.values())


def bind(specs, shapes, names, constraints=()):
    """The sizes (symbol name -> int) of one call.

    specs: each argument leaf's symbolic shape; shapes: the call's concrete shapes; names: each
    leaf's name for messages; constraints: the scope's explicit constraints (jax.export's
    `Constraint`s: cmp, e1, e2, debug_str). Every symbol is at least 1 (jax.export's implicit
    constraint)."""
    env, where = {}, {}
    pending = []
    for spec, shape, name in zip(specs, shapes, names):
        if len(spec) != len(shape):
            raise ShapeConstraintError(
                f"{name} has shape {tuple(shape)}, rank {len(shape)}; the function was traced "
                f"for rank {len(spec)}, shape ({', '.join(map(str, spec))})")
        for axis, (d, n) in enumerate(zip(spec, shape)):
            at = f"{name}.shape[{axis}]"
            if not dims.is_symbolic(d):
                if int(d) != int(n):
                    raise ShapeConstraintError(
                        f"{at} is {n}; the function was traced with the fixed size {d} there")
                continue
            var = dims.plain_symbol(d)
            if var is None:
                pending.append((d, int(n), at))
            elif var in env and env[var] != int(n):
                raise ShapeConstraintError(
                    f"symbolic dimension '{var}' is {env[var]} in {where[var]} but {n} in {at}; "
                    f"arguments that share a symbol must agree on its size")
            else:
                env.setdefault(var, int(n))
                where.setdefault(var, at)
    for d, n, at in pending:
        missing = dims.symbols([d]) - set(env)
        if len(missing) == 1:
            (var,) = missing
            solved = _solve(d, n, var, env)
            if solved is None:
                raise ShapeConstraintError(
                    f"{at} is {n}, and '{d}' is not {n} for any whole {var} >= 1")
            env[var], where[var] = solved, at
            continue
        if missing:
            raise ShapeConstraintError(
                f"{at} is the expression '{d}', and no argument gives "
                f"{', '.join(sorted(missing))} alone; declare some argument's dimension as "
                f"exactly that symbol")
        if dims.evaluate(d, env) != n:
            raise ShapeConstraintError(
                f"{at} is {n}, but '{d}' is {dims.evaluate(d, env)} with "
                f"{_sizes(env, dims.symbols([d]), where)}")
    for var, n in env.items():
        if n < 1:
            raise ShapeConstraintError(
                f"symbolic dimension '{var}' is {n} in {where[var]}; symbolic dimensions are at "
                f"least 1 (jax.export's rule: give a static shape for empty arrays)")
    for c in constraints:
        left, right = dims.evaluate(c.e1, env), dims.evaluate(c.e2, env)
        ok = left >= right if c.cmp.name == "GEQ" else left == right
        if not ok:
            used = dims.symbols([c.e1, c.e2])
            raise ShapeConstraintError(
                f"the call breaks the constraint '{c.debug_str}' with "
                f"{_sizes(env, used, where)}")
    return env


def _solve(d, n, var, env):
    """The whole value >= 1 of `var` at which `d` (linear in its one unknown `var`: c*var + k,
    as '2*k' or 'k + 1') is n, else None."""
    at = lambda x: dims.evaluate(d, {**env, var: x})      # noqa: E731
    k, c = at(0), at(1) - at(0)
    if c == 0 or (n - k) % c:
        return None
    value = (n - k) // c
    return value if value >= 1 and at(value) == n else None


def _sizes(env, used, where):
    return ", ".join(f"{v} = {env[v]} (from {where[v]})" for v in sorted(used) if v in env)
