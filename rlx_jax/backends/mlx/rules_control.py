"""Control flow on MLX: If, While, Scan. `mx.compile` traces a function once and cannot branch
on data, so each kind lowers as follows (`plan(graph)` lists the choice made for every node):

- If: every branch is computed and the result picked elementwise with `mx.where` chains on
  (clamped index == i). `where` selects, it does not blend: no value of an untaken branch reaches
  the result, NaN and Inf included (0 * NaN never happens; the untaken branch is simply not
  chosen). It stays inside the compiled function. An If whose branches contain a host loop is a
  host branch instead: the index is read (`.item()`) and only the taken branch runs, since
  running an untaken loop could be costly or never end.
- While: a host loop. The cond and body regions each become an MLX function (`mx.compile`d when
  the executable compiles) and Python drives the loop: `while cond(...).item(): carry =
  body(...)`, the carry evaluated after every step. A graph holding a While is cut into
  compiled segments around it (segments.py).
- Scan: unrolled into the enclosing graph when `length * size(body) <= UNROLL_MAX` (size: the
  body's node count, nested scans counted unrolled), else a host loop over the body function
  (compiled), like While. `reverse` walks xs from the end and writes each y at its own index, as
  `lax.scan`; ys are stacked on axis 0; a zero-length scan returns the initial carry and empty ys.
  The node's `unroll` attribute does not enter the choice (it never changes the values).

Under `build_program` (`Lowered.op_counts(level="backend")`) nothing is evaluated: a host loop's
body (and a While's cond) is traced once, so an unrolled scan shows `length` copies of its body's
ops and a host-loop scan one.
"""
import mlx.core as mx

from ...ir.ops import OpKind as K
from .table import mlx_rule, out_dtype

UNROLL_MAX = 1024
"""Largest `length * body size` a Scan is unrolled at (see docs/primitives.md, "Control flow on MLX": the
unrolled graph's first-call cost grows with its size, the host loop pays per step)."""


def size(graph):
    """Nodes of `graph` as it would run unrolled (boundary nodes not counted)."""
    total = 0
    for n in graph.nodes:
        if n.kind in (K.Input, K.Constant):
            continue
        inner = sum(size(r) for r in n.regions)
        total += 1 + (n.attrs["length"] * inner if n.kind is K.Scan else inner)
    return total


def unrolled(node):
    """Whether this Scan is unrolled into the enclosing graph."""
    body, = node.regions
    return node.attrs["length"] * size(body) <= UNROLL_MAX and not has_host(body)


def is_host(node):
    """Whether `node` needs Python between its steps (it cannot sit in an mx.compile'd graph)."""
    if node.kind is K.While:
        return True
    if node.kind is K.Scan:
        return not unrolled(node)
    if node.kind is K.If:
        return any(has_host(r) for r in node.regions)
    return False


def has_host(graph):
    return any(is_host(n) for n in graph.nodes)


def plan(graph):
    """How each control node of `graph` (regions included) lowers, in walk order:
    [(kind and attributes, source line, choice)], choice one of "select", "host branch",
    "host loop", "unrolled"."""
    out = []
    for n in graph.walk():
        if n.kind is K.If:
            choice = "host branch" if is_host(n) else "select"
        elif n.kind is K.While:
            choice = "host loop"
        elif n.kind is K.Scan:
            choice = "host loop" if is_host(n) else "unrolled"
        else:
            continue
        out.append((f"{n.kind.name}{n.attr_text()}", n.src, choice))
    return out


def _result(node, values):
    """A rule's return: the one value of a single-output node, else the tuple."""
    values = tuple(values)
    return values[0] if len(node.outputs) == 1 else values


@mlx_rule(K.If)
def _if(ctx, node, index, *operands):
    branches = node.regions
    last = len(branches) - 1
    index = mx.clip(index, 0, last)
    if is_host(node) and not ctx.program:
        return _result(node, ctx.function(branches[int(index.item())])(*operands))
    results = [ctx.run(b, operands) for b in branches]
    chosen = results[last]
    for i in range(last - 1, -1, -1):
        pick = index == i
        chosen = [mx.where(pick, a, b) for a, b in zip(results[i], chosen)]
    return _result(node, chosen)


@mlx_rule(K.While)
def _while(ctx, node, *operands):
    nc, nb = node.attrs["cond_nconsts"], node.attrs["body_nconsts"]
    cconsts, bconsts, carry = operands[:nc], operands[nc:nc + nb], list(operands[nc + nb:])
    cond_region, body_region = node.regions
    if ctx.program:                       # traced once: one step of cond and body
        ctx.extra.extend(ctx.run(cond_region, (*cconsts, *carry)))
        return _result(node, ctx.run(body_region, (*bconsts, *carry)))
    cond, body = ctx.function(cond_region), ctx.function(body_region)
    while bool(cond(*cconsts, *carry)[0].item()):
        carry = list(body(*bconsts, *carry))
        mx.eval(carry)
    return _result(node, carry)


@mlx_rule(K.Scan)
def _scan(ctx, node, *operands):
    a = node.attrs
    length, nc, nk = a["length"], a["num_consts"], a["num_carry"]
    consts, carry = operands[:nc], list(operands[nc:nc + nk])
    xs = operands[nc + nk:]
    body, = node.regions
    ny = len(node.outputs) - nk
    if length == 0:
        return _result(node, (*carry, *[mx.zeros(o.shape, out_dtype(node, nk + i))
                                        for i, o in enumerate(node.outputs[nk:])]))
    host = is_host(node)
    if host and ctx.program:             # traced once, on the first step
        out = ctx.run(body, (*consts, *carry, *[x[0] for x in xs]))
        ys = [mx.broadcast_to(y[None], o.shape) for y, o in zip(out[nk:], node.outputs[nk:])]
        return _result(node, (*out[:nk], *ys))
    step = ctx.function(body) if host else (lambda *args: ctx.run(body, args))
    ys = [[None] * length for _ in range(ny)]
    order = range(length - 1, -1, -1) if a["reverse"] else range(length)
    for t in order:
        out = step(*consts, *carry, *[x[t] for x in xs])
        carry = list(out[:nk])
        for j, y in enumerate(out[nk:]):
            ys[j][t] = y
        if host:
            mx.eval(carry, out[nk:])
    return _result(node, (*carry, *[mx.stack(y, axis=0) for y in ys]))
