"""Coverage: every listed JAX primitive is exercised by the op table, every exercised primitive
has a frontend rule or an UNSUPPORTED reason, the generated coverage documents are current, and
every backend's claim tables agree with its lowering rules."""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_jax import coverage
from rlx_jax.backends import claims
from rlx_jax.backends.base import all_backends, kept_kinds
from rlx_jax.frontend.rules import JAXPR_RULES, UNSUPPORTED
from rlx_jax.frontend.trace import CALL_PARAMS
from rlx_jax.ir.ops import BACKWARD, FORWARD, OpKind as K
from rlx_jax.passes.decompose import DECOMPS

from .op_table import CASES

# The primitives (as jax 0.10.2 names them) the op table must exercise.
REQUIRED = """
add sub mul div rem pow integer_pow neg abs sign max min nextafter exp exp2 log log1p expm1
tanh logistic sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh sqrt rsqrt cbrt
square floor ceil round is_finite erf erfc erf_inv lgamma digamma and or not xor shift_left
shift_right_logical shift_right_arithmetic population_count eq ne lt le gt ge select_n clamp
convert_element_type bitcast_convert_type iota copy stop_gradient add_any dot_general reduce_sum
reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin cumsum cumprod
cummax cummin cumlogsumexp broadcast_in_dim reshape transpose squeeze rev concatenate pad tile
slice dynamic_slice dynamic_update_slice gather scatter scatter-add scatter-mul scatter-min
scatter-max split stack unstack sort top_k conv_general_dilated reduce_window_sum
reduce_window_max reduce_window_min reduce_window select_and_scatter_add select_and_gather_add
empty2 reduce_precision
""".split()
# primitives of the newer supported JAX releases (older ones stage the same jnp calls with others)
SINCE = {"stack": (0, 10), "unstack": (0, 10)}
_JAX = tuple(int(p) for p in jax.__version__.split(".")[:2])
REQUIRED = [p for p in REQUIRED if _JAX >= SINCE.get(p, (0, 0))]


def _sub_jaxprs(value):
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _sub_jaxprs(v)
    elif isinstance(value, jax.extend.core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jax.extend.core.Jaxpr):
        yield value


def primitive_names(jaxpr, into=None):
    """Every primitive name in `jaxpr` and in the jaxprs nested in its eqns' params."""
    into = set() if into is None else into
    for eqn in jaxpr.eqns:
        into.add(eqn.primitive.name)
        for p in eqn.params.values():
            for sub in _sub_jaxprs(p):
                primitive_names(sub, into)
    return into


def _loss(fn):
    def loss(*a):
        outs = [o for o in jax.tree.leaves(fn(*a)) if jnp.issubdtype(o.dtype, jnp.floating)]
        return sum(jnp.sum(o) for o in outs)
    return loss


@functools.lru_cache(maxsize=None)
def case_primitives():
    """{case name: primitives of its jaxpr (and of its gradient's jaxpr when grad=True)}."""
    out = {}
    for case in CASES:
        args = case.args(np.random.RandomState(0))
        jx = jax.make_jaxpr(case.fn, static_argnums=case.static_argnums)(*args)
        names = primitive_names(jx.jaxpr)
        if case.grad:
            primitive_names(jax.make_jaxpr(jax.grad(_loss(case.fn)))(*args).jaxpr, names)
        out[case.name] = names
    return out


def test_primitive_extraction_sees_nested_jaxprs():
    f = jax.jit(lambda x: jax.nn.relu(jnp.cumsum(x)))
    names = primitive_names(jax.make_jaxpr(f)(jnp.ones(3)).jaxpr)
    assert {"jit", "custom_jvp_call", "cumsum", "max"} <= names


def test_every_required_primitive_has_a_case():
    seen = set().union(*case_primitives().values())
    missing = sorted(set(REQUIRED) - seen)
    assert not missing, f"no op-table case produces: {missing}"


@pytest.mark.parametrize("prim", REQUIRED)
def test_case_named_after_primitive_produces_it(prim):
    """A case named `<prim>_...` really contains `prim` (its name does not lie)."""
    named = {n: p for n, p in case_primitives().items() if n.startswith(prim + "_")
             and not any(n.startswith(q + "_") and len(q) > len(prim) for q in REQUIRED)}
    liars = sorted(n for n, p in named.items() if prim not in p)
    assert not liars, f"cases named after {prim} that do not produce it: {liars}"


def test_every_exercised_primitive_is_handled():
    handled = set(JAXPR_RULES) | set(UNSUPPORTED) | {p for p, k in CALL_PARAMS.items() if k}
    seen = set().union(*case_primitives().values())
    unhandled = sorted(seen - handled)
    assert not unhandled, f"primitives with neither a rule nor an UNSUPPORTED reason: {unhandled}"


def test_unsupported_reasons_are_sentences():
    for prim, why in UNSUPPORTED.items():
        assert prim not in JAXPR_RULES, prim
        assert isinstance(why, str) and len(why.split()) >= 3, (prim, why)


def test_generated_documents_are_current():
    for path, text in coverage.targets():
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        assert current == text, (
            f"{os.path.relpath(path, coverage.ROOT)} is out of date with the rule and claim "
            f"tables; run `python -m rlx_jax.coverage --write`")


def test_documents_mention_every_rule_and_claim():
    prims = coverage.primitives_markdown()
    for name in list(JAXPR_RULES) + list(UNSUPPORTED):
        assert f"`{name}`" in prims, name
    table = coverage.op_coverage_markdown()
    backends = coverage.load_backends()
    assert "xla" in backends
    for b in backends.values():
        for kind in b.SUPPORTED_OPS:
            assert f"| {kind.name} |" in table, (b.name, kind)


def test_page_block_replacement():
    text = "intro\n<!-- primitives:begin -->\nold\n<!-- primitives:end -->\ntail\n"
    assert coverage.page_block(text, "new\n") == (
        "intro\n<!-- primitives:begin -->\nnew\n<!-- primitives:end -->\ntail\n")
    assert coverage.page_block("no markers", "new\n") is None


def test_divergences_name_existing_cases():
    """A divergence entry for a renamed or removed case would silently stop applying; a
    dtype entry for a dtype no case has would too."""
    from .divergences import DIVERGENCES, DTYPE_DIVERGENCES
    from .op_table import Expect
    from .op_table_base import SHORT
    from .test_x64 import _NAMES as X64_NAMES
    names = {c.name for c in CASES} | set(X64_NAMES)
    for backend, table in DIVERGENCES.items():
        stale = sorted(set(table) - names)
        assert not stale, f"tests/divergences_{backend}.py names no such case: {stale}"
        for name, exp in table.items():
            assert isinstance(exp, Expect) and exp.reason, (backend, name)
    for backend, table in DTYPE_DIVERGENCES.items():
        unknown = sorted(set(table) - set(SHORT))
        assert not unknown, f"tests/divergences_{backend}.py: no such dtype: {unknown}"
        for dtype, exp in table.items():
            assert isinstance(exp, Expect) and exp.reason, (backend, dtype)


def test_case_divergences_are_not_dtype_divergences():
    """A per-case entry that says what the case's dtype entry already says is redundant: the
    reason is the dtype, stated once in DTYPE_DIVERGENCES."""
    from . import divergences
    from .test_x64 import _x64_cases
    with jax.enable_x64(True):
        x64 = _x64_cases()
    redundant = []
    for backend, table in divergences.DIVERGENCES.items():
        for cases, x64_on in ((CASES, False), (x64, True)):
            for case in cases:
                own = table.get(case.name)
                if own is None:
                    continue
                with jax.enable_x64(x64_on):
                    del table[case.name]
                    try:
                        by_dtype = divergences.divergence(case, backend)
                    finally:
                        table[case.name] = own
                if by_dtype == own:
                    redundant.append((backend, case.name))
    assert not redundant, f"per-case entries that repeat a dtype entry: {redundant}"


def test_op_coverage_tolerates_a_missing_backend():
    xla = coverage.load_backends(("xla",))
    text = coverage.op_coverage_markdown(xla)
    assert "not importable when this was generated: mlx, coreml" in text
    assert "| kind | group | xla |" in text and "| Gather | primitive | native |" in text
    kinds = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")}
    assert "MatMul" in kinds and "Input" in kinds


# ---- claims and rules agree, on every registered backend ----

# backends whose claims include every high-level forward kind (xla claims PRIMITIVE only)
CLAIMS_EVERY_FORWARD_KIND = {"coreml"}


@pytest.mark.parametrize("name", sorted(all_backends()))
def test_claims_match_rules(name):
    """A backend's claim tables are its rule table's claims (a LoweringTable) or, for a
    backend that sets them on its class (xla), agree with its rules."""
    from rlx_jax.tables import LoweringTable

    from .test_decomp import CASES as KIND_CASES
    b = all_backends()[name]
    if not b.available():
        pytest.skip(f"{name} is not available: {b.unavailable_reason()}")
    table = b.rules()
    rules = set(table)
    supported, native_bwd, bwd_only = b.SUPPORTED_OPS, b.NATIVE_BACKWARD_OPS, b.BACKWARD_OPS
    predicates = b.CLAIM_PREDICATES
    if isinstance(table, LoweringTable):     # derived: every registered claim, nothing else
        assert supported | native_bwd | bwd_only == set(table.claims) | {K.Input}, name
        assert predicates == table.predicates, name

    # every claimed kind has a rule and every rule is claimed
    claimed = (supported | native_bwd) - {K.Input}
    assert claimed - rules == set(), (
        f"{name}: claimed without a rule: {sorted(k.name for k in claimed - rules)}")
    assert rules - claimed == set(), (
        f"{name}: rule not claimed: {sorted(k.name for k in rules - claimed)}")
    assert claims(name).SUPPORTED_OPS_TRAINING == supported | native_bwd, name

    # BACKWARD_OPS are run by decomposition only: no native rule, and a decomposition each
    assert not bwd_only & rules, name
    assert all(k in DECOMPS for k in bwd_only), name
    assert not native_bwd & bwd_only, name

    # native backward kinds are backward kinds; no other backward kind is claimed as supported
    assert native_bwd <= BACKWARD, name
    assert not supported & (BACKWARD - native_bwd), name
    assert set(predicates) <= native_bwd, name

    # the native high-level / backward kinds are exactly the rule table's FORWARD|BACKWARD kinds
    native = (supported & FORWARD) | native_bwd
    assert native <= rules, name
    assert {k for k in rules if k in FORWARD or k in BACKWARD} == native, name
    if name in CLAIMS_EVERY_FORWARD_KIND:
        assert FORWARD <= supported, name
    # every native high-level / backward kind has a single-node case (tests/nn_cases.py)
    assert native <= {c.kind for c in KIND_CASES}, name


def test_lowering_table_refuses_a_wrong_claim():
    """A rule claims its kind as it is: a backward kind only as native backward (or declared
    decomposed, without a rule), a forward kind only as native; one claim per kind."""
    from rlx_jax.tables import NATIVE_BACKWARD, LoweringTable
    t = LoweringTable("test")
    t.rule(K.Softmax)(len)
    t.rule(K.RmsNormBackwardInput, claim=NATIVE_BACKWARD)(len)
    t.decomposed(K.ReluBackward)
    assert t.kinds("native") == {K.Softmax}
    assert t.kinds(NATIVE_BACKWARD) == {K.RmsNormBackwardInput}
    assert t.kinds("decomposed") == {K.ReluBackward} and K.ReluBackward not in t
    with pytest.raises(ValueError, match="RopeBackward is a backward kind"):
        t.rule(K.RopeBackward)(len)
    with pytest.raises(ValueError, match="LayerNorm is not a backward kind"):
        t.rule(K.LayerNorm, claim=NATIVE_BACKWARD)(len)
    with pytest.raises(ValueError, match="Binary is not a backward kind"):
        t.decomposed(K.Binary)
    with pytest.raises(KeyError, match="duplicate claim"):
        t.rule(K.Softmax)(len)
    with pytest.raises(KeyError, match="duplicate claim"):
        t.decomposed(K.RmsNormBackwardInput)
    with pytest.raises(ValueError, match="decomposed"):
        t.rule(K.AttentionBackward, claim="decomposed")


@pytest.mark.parametrize("name", sorted(all_backends()))
def test_claims_prints_the_seed_style_tables(name):
    """rlx_jax.backends.claims(name): the four seed tables and the predicated kinds, from the
    backend class; legalization keeps exactly SUPPORTED_OPS_TRAINING minus decomposed-only
    backward kinds."""
    b, t = all_backends()[name], claims(name)
    assert t.SUPPORTED_OPS == b.SUPPORTED_OPS and t.BACKWARD_OPS == b.BACKWARD_OPS
    assert t.SUPPORTED_OPS_TRAINING == b.SUPPORTED_OPS | b.NATIVE_BACKWARD_OPS
    assert set(kept_kinds(b)) == t.SUPPORTED_OPS_TRAINING - (t.BACKWARD_OPS
                                                              - t.NATIVE_BACKWARD_OPS)
    text = str(t)
    for field in ("SUPPORTED_OPS", "NATIVE_BACKWARD_OPS", "BACKWARD_OPS"):
        line = next(ln for ln in text.splitlines() if ln.startswith(field + " ("))
        assert line.startswith(f"{field} ({len(getattr(t, field))}):"), line
        assert all(k.name in line for k in getattr(t, field)), line


# ---- every OpKind is reached and lowered; the reserved RLX kinds are not OpKinds ----

def test_every_kind_is_reached_lowered_or_reserved():
    """ir/reached.py names, for every OpKind, how a JAX program reaches it (each JAX primitive
    it names has a frontend rule), some backend lowers or decomposes every kind, and no
    reserved RLX name (ir/reserved.py) is an OpKind."""
    from rlx_jax.ir.reached import REACHED
    from rlx_jax.ir.reserved import RESERVED
    assert set(REACHED) == set(K), set(K) ^ set(REACHED)
    for kind, (prims, other) in REACHED.items():
        assert prims or other, kind
        unknown = [p for p in prims.split() if p not in JAXPR_RULES]
        assert not unknown, (kind, unknown)
    assert not set(RESERVED) & {k.name for k in K}
    assert all(len(how.split()) >= 4 for how in RESERVED.values())
    backends = coverage.load_backends()
    decomps = set(DECOMPS) | coverage.KEY_KINDS
    unlowered = [k for k in K if all(coverage.cell(b, k, decomps) == "—"
                                     for b in backends.values())]
    assert not unlowered, unlowered


@functools.lru_cache(maxsize=None)
def _case_kinds():
    """{case name: the kinds of its traced IR graph, regions included}."""
    from rlx_jax.frontend.trace import trace
    out = {}
    for case in CASES:
        args = case.args(np.random.RandomState(0))
        graph = trace(case.fn, *args, static_argnums=case.static_argnums)
        out[case.name] = {n.kind for n in graph.walk()}
    return out


def test_reached_primitives_produce_their_kind():
    """Tracing the op table: for every kind ir/reached.py says JAX primitives reach, some case
    using one of those primitives traces to a graph holding that kind."""
    from rlx_jax.ir.reached import REACHED
    kinds, prims = _case_kinds(), case_primitives()
    unproduced = []
    for kind, (names, _) in REACHED.items():
        names = set(names.split())
        using = [c for c, p in prims.items() if p & names]
        if using and not any(kind in kinds[c] for c in using):
            unproduced.append(kind)
    assert not unproduced, f"no op-table case using the named primitives produces {unproduced}"
