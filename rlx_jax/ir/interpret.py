"""The one interpreter loop: walk nodes in order, apply RULES[kind], annotate errors.

Every backend lowering and the reference executor run through `interpret`. A rule is
`rule(ctx, node, *operands) -> value | tuple(values)`; `ctx` is the backend's own context.
"""
from ..errors import LoweringError, RlxError
from .ops import OpKind


def where(node):
    return f" at {node.src}" if node.src else ""


def rule_name(rule):
    """`module.qualname` of a rule function (the probe's wrapper names the rule it wraps)."""
    while hasattr(rule, "__wrapped__"):          # through every view (probe, symbolic guard)
        rule = rule.__wrapped__
    return f"{getattr(rule, '__module__', '?')}.{getattr(rule, '__qualname__', repr(rule))}"


def rule_failure(backend, node, rule, exc):
    """The error to raise for `exc` out of `rule` on `node`: an RlxError (a refusal or another
    error raised on purpose) gets the node's text and source line once; any other exception is
    a bug in the rule, a LoweringError naming the node, its line and the rule (chain `exc`)."""
    if isinstance(exc, RlxError):
        if not getattr(exc, "_rlx_annotated", False):
            exc.args = (f"{exc.args[0] if exc.args else exc}\n  in `{node.text()}`{where(node)}",)
            exc._rlx_annotated = True
        return exc
    err = LoweringError(
        f"backend '{backend}': the rule for {node.kind.name} ({rule_name(rule)}) raised "
        f"{type(exc).__name__}: {exc}\n  in `{node.text()}`{where(node)}\n"
        f"  This is a bug in rlx_jax, not a limit of the backend: please report it with this "
        f"message; backend='xla' runs the program meanwhile.")
    err._rlx_annotated = True
    err.rule = rule_name(rule)
    return err


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
        except RlxError as e:          # raised on purpose (a refusal, ...): annotated, as it is
            rule_failure(backend, n, rule, e)
            raise
        except Exception as e:  # noqa: BLE001 - anything else is a bug in the rule: it surfaces
            raise rule_failure(backend, n, rule, e) from e
        if len(n.outputs) == 1:
            env[n.out.id] = out
        else:
            for o, val in zip(n.outputs, out):
                env[o.id] = val
    return [env[v.id] for v in graph.outputs]
