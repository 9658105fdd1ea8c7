"""The patterns worth a loose match at a node: every (pattern, rank) keyed by the two top levels
of its template, so that a node is offered only those whose key it has.

A loose match (passes/patterns.py, Matcher with exact=False) succeeds at a user value only if
each template node it visits has the user node's kind, sub-operation (`fn`), output index,
dtype class and arity, a template Input standing for any value of its dtype class, and a
commutative node's operands matching in one order or the other. Those checks at the template
root and its operands are the key here (`head`, `key`); a sum pattern (matched term by term,
patterns.terms) is keyed by its terms, each of which must be some term of the user's sum.
A node's keys (`variants`: its operands as themselves or as wildcards, commutative ones in
both orders) find the (pattern, rank) pairs that can match there; the others would fail their
loose match, so `Index.candidates` leaves them out and the same pattern fires, in table
order, as when every pattern of the root's signature is tried. Most pairs fail within these
two levels: on a flax LM train step the index leaves about one pair in twenty.
"""
import itertools

from ..ir.ops import OpKind as K
from .patterns import COMMUTATIVE, dclass, is_sum, signature, terms

MAX_OPERANDS = 4       # a node with more operands is keyed by its own head (2**n variants)


def head(v):
    """What the loose match compares at value v's node (None for a value with no node)."""
    n = v.node
    if n is None:
        return None
    return n.kind, n.attrs.get("fn"), v.index, dclass(v.dtype), len(n.inputs)


def _operand(p):
    """A template operand: its head, or a wildcard of its dtype class for an Input."""
    return ("*", dclass(p.dtype)) if p.node.kind is K.Input else head(p)


def key(p):
    """The key of template value p: its head and its operands'; an Input is a wildcard."""
    if p.node.kind is K.Input:
        return "*", dclass(p.dtype)
    ins = p.node.inputs
    return head(p), None if len(ins) > MAX_OPERANDS else tuple(_operand(i) for i in ins)


def variants(u):
    """Every key a template value matching user value u at the root can have."""
    h = head(u)
    if h is None:
        return set()
    ins = u.node.inputs
    if len(ins) > MAX_OPERANDS:
        return {(h, None)}
    opts = [(head(i), ("*", dclass(i.dtype))) for i in ins]
    orders = [opts, opts[::-1]] if (h[0], h[1]) in COMMUTATIVE and len(opts) == 2 else [opts]
    return {(h, combo) for o in orders for combo in itertools.product(*o)}


class Index:
    """The (pattern, (rank, variant)) pairs of `entries` (in table order, each rank and dtype
    variant with a template: patterns.VARIANTS) by root signature and key; the key holds the
    dtype classes, so a node is offered the templates of its own dtypes."""

    def __init__(self, entries):
        self.keyed, self.sums, self.order = {}, {}, {}
        for pattern, rank in entries:
            self.order.setdefault(pattern, len(self.order))
            p = pattern.ref.template(*rank).outputs[pattern.out]
            pos = (self.order[pattern], pattern.ref.ranks.index(rank[0]),
                   pattern.ref.variants().index(rank[1]))
            if is_sum(p):
                self.sums.setdefault(signature(p), []).append(
                    (pos, pattern, rank, frozenset(key(t) for t in terms(p))))
            else:
                self.keyed.setdefault(signature(p), {}).setdefault(key(p), []).append(
                    (pos, pattern, rank))

    def __bool__(self):
        return bool(self.keyed or self.sums)

    def has(self, sig):
        return sig in self.keyed or sig in self.sums

    def candidates(self, u, uterms=None):
        """[(pattern, [(rank, variant)])] that can match at user value u, in table order;
        uterms: u's terms (patterns.terms) when u is a sum a sum pattern may match."""
        sig = signature(u)
        hits = []
        table = self.keyed.get(sig)
        if table:
            for k in variants(u):
                hits.extend(table.get(k, ()))
        sums = self.sums.get(sig)
        if sums and uterms is not None:
            have = set()
            for t in uterms:
                have.add(("*", dclass(t.dtype)))
                have.update(variants(t))
            hits.extend(e[:3] for e in sums if e[3] <= have)
        out = {}
        for _, pattern, rank in sorted(hits, key=lambda e: e[0]):
            out.setdefault(pattern, []).append(rank)
        return list(out.items())
