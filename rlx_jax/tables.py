"""The package's flat tables.

`rule_table(name)`: a dict plus a decorator that fills it and refuses a duplicate key (the
frontend's JAXPR_RULES, the reference, the decompositions, the recognizers, the MIL executor).

`LoweringTable`: a backend's lowering rules, each registered with the claim it makes, so a
backend's claim tables are derived from its rules, never written by hand:

    RULES = LoweringTable("coreml")
    @RULES.rule(K.Softmax)                                  # SUPPORTED_OPS
    @RULES.rule(K.RmsNormBackwardInput, claim=NATIVE_BACKWARD)          # NATIVE_BACKWARD_OPS
    @RULES.rule(K.MaxPool2dBackward, claim=NATIVE_BACKWARD, when=fits)  # CLAIM_PREDICATES
    RULES.decomposed(K.ReluBackward)                        # BACKWARD_OPS: no rule, by design

A backward kind (ir.ops.BACKWARD) must say `claim=NATIVE_BACKWARD` (legalization keeps it only
for programs traced with native backward kinds), and only backward kinds may.
"""
from .ir.ops import BACKWARD

NATIVE = "native"                    # lowered by its rule: SUPPORTED_OPS
NATIVE_BACKWARD = "native backward"  # a backward kind lowered by its rule: NATIVE_BACKWARD_OPS
DECOMPOSED = "decomposed"            # a backward kind run only by decomposition: BACKWARD_OPS


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


class LoweringTable(dict):
    """OpKind -> rule(ctx, node, *operands) of one backend, with `claims` ({kind: NATIVE |
    NATIVE_BACKWARD | DECOMPOSED}) and `predicates` ({kind: fn(node) -> bool}: the kind is
    claimed only on the nodes its predicate accepts; the others are decomposed)."""

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self.claims = {}
        self.predicates = {}

    def _claim(self, kind, claim):
        if kind in self.claims:
            raise KeyError(f"{self.backend} lowering table: duplicate claim for {kind}")
        backward = kind in BACKWARD
        if backward != (claim in (NATIVE_BACKWARD, DECOMPOSED)):
            raise ValueError(
                f"{self.backend} lowering table: {kind.name} is "
                f"{'a backward' if backward else 'not a backward'} kind; claim "
                f"{NATIVE_BACKWARD!r} or {DECOMPOSED!r} " + ("it" if backward else "only") +
                f" backward kinds, {NATIVE!r} the others (got {claim!r})")
        self.claims[kind] = claim

    def rule(self, *kinds, claim=NATIVE, when=None):
        """Decorator: `fn` is the rule of every kind in `kinds`, claimed as `claim` (on the
        nodes `when(node)` accepts, when given)."""
        if claim == DECOMPOSED:
            raise ValueError("a kind with a rule is not claimed as decomposed; use "
                             "LoweringTable.decomposed for kinds without a rule")

        def deco(fn):
            for k in kinds:
                self._claim(k, claim)
                self[k] = fn
                if when is not None:
                    self.predicates[k] = when
            return fn
        return deco

    def decomposed(self, *kinds):
        """Backward `kinds` this backend runs only through their decomposition (no rule)."""
        for k in kinds:
            self._claim(k, DECOMPOSED)

    def kinds(self, claim):
        """The kinds claimed as `claim`."""
        return frozenset(k for k, c in self.claims.items() if c == claim)
