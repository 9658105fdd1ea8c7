"""Greedy shrinking of a failing program to a minimal one that still fails the same way.

Moves, tried in order and repeated until none applies (or the budget of predicate calls is
spent): drop the gradient; keep a single output, or an intermediate value as the output; cut an
op (its result becomes a new input of the same aval, plain or holding NaN/inf, and whatever only
fed it disappears); bypass an op (its uses take one of its operands of the same aval); shrink an
input dimension to 1 or to half. Every candidate is re-typed by tracing first, so ill-typed ones
(a reshape baked for the old size) are skipped without running.
"""
import dataclasses

from .program import FLOATS


def _typed(prog):
    try:
        return prog.avals()
    except Exception:               # noqa: BLE001 (an ill-typed candidate)
        return None


def _candidates(prog, avals):
    if prog.grad:
        yield dataclasses.replace(prog.copy(), grad=None)
    if len(prog.outputs) > 1:
        order = ([prog.grad["output"]] if prog.grad else []) + list(range(len(prog.outputs)))
        for k in dict.fromkeys(order):
            yield prog.with_outputs([k])
    for o in prog.ops[:-1]:              # an intermediate value as the only output
        p = prog.copy()
        p.outputs, p.grad = [o.name], None
        yield p.dce()
    for o in reversed(prog.ops):
        yield prog.cut(o.name, seed=len(prog.inputs), avals=avals)
        if avals[o.name][1] in FLOATS:   # the op may only matter for the NaN/inf it makes
            yield prog.cut(o.name, seed=len(prog.inputs), kind="special", avals=avals)
    for o in reversed(prog.ops):
        for a in dict.fromkeys(o.args):
            if avals.get(a) == avals[o.name]:
                p = prog.rename(o.name, a)
                p.ops = [q for q in p.ops if q.name != o.name]
                yield p.dce()
    for i, inp in enumerate(prog.inputs):
        for d, n in enumerate(inp.shape):
            for smaller in dict.fromkeys((1, n // 2)):
                if 0 < smaller < n:
                    p = prog.copy()
                    shape = list(inp.shape)
                    shape[d] = smaller
                    p.inputs[i].shape = tuple(shape)
                    yield p


def size(prog):
    """What shrinking minimizes: ops first, then the number of input elements."""
    elements = sum(max(1, int(__import__("numpy").prod(i.shape))) for i in prog.inputs)
    return (len(prog.ops), len(prog.outputs), bool(prog.grad), elements)


def shrink(prog, still_fails, budget=150):
    """The smallest program found that `still_fails` (a predicate that must be True for `prog`);
    returns (program, predicate calls)."""
    calls = 0
    improved = True
    while improved and calls < budget:
        improved = False
        avals = _typed(prog)
        if avals is None:
            break
        for cand in _candidates(prog, avals):
            if calls >= budget:
                break
            if not cand.ops or size(cand) >= size(prog) or _typed(cand) is None:
                continue
            calls += 1
            try:
                ok = still_fails(cand)
            except Exception:       # noqa: BLE001 (a candidate the oracle cannot judge)
                ok = False
            if ok:
                prog, improved = cand, True
                break
    return prog, calls
