"""The one interpreter loop: walk nodes in order, apply RULES[kind], annotate errors.

Every backend lowering and the reference executor run through `interpret`. A rule is
`rule(ctx, node, *operands) -> value | tuple(values)`; `ctx` is the backend's own context.
"""
from ..errors import LoweringError, RlxError
from .ops import OpKind


def rule_table(name):
    """A module-level rule table plus a decorator that refuses duplicate keys."""
    table = {}

    def register(*kinds):
        def deco(fn):
            for k in kinds:
                if k in table:
                    raise KeyError(f"{name}: duplicate rule for {k}")
                table[k] = fn
            return fn
        return deco
    return table, register


def where(node):
    return f" at {node.src}" if node.src else ""


def interpret(graph, rules, args, ctx=None, backend="?"):
    """Evaluates `graph` on `args` (one per graph input) with `rules`; returns the outputs."""
    env = {}
    for n in graph.nodes:
        if n.kind is OpKind.Input:
            env[n.out.id] = args[n.attrs["index"]]
            continue
        rule = rules.get(n.kind)
        if rule is None:
            raise LoweringError(
                f"backend '{backend}' has no lowering for {n.kind.name}: `{n.text()}`{where(n)}. "
                f"Use another backend, or file a rule for this op.")
        try:
            out = rule(ctx, n, *[env[v.id] for v in n.inputs])
        except RlxError as e:
            if getattr(e, "_rlx_annotated", False):
                raise
            e.args = (f"{e.args[0] if e.args else e}\n  in `{n.text()}`{where(n)}",)
            e._rlx_annotated = True
            raise
        except Exception as e:  # noqa: BLE001 - every failure names the node and source line
            err = LoweringError(
                f"backend '{backend}' failed to lower {n.kind.name}: {type(e).__name__}: {e}\n"
                f"  in `{n.text()}`{where(n)}\n"
                f"  Use another backend, or file a rule for this case.")
            err._rlx_annotated = True
            raise err from e
        if len(n.outputs) == 1:
            env[n.out.id] = out
        else:
            for o, val in zip(n.outputs, out):
                env[o.id] = val
    return [env[v.id] for v in graph.outputs]
