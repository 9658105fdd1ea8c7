"""A bug inside a lowering rule surfaces: it is a LoweringError naming the node, the user's
file:line and the rule, the original exception chained, under every `fallback` setting. Only a
RefusalError (a documented refusal) sends a node to the host.

Bugs are injected by replacing a rule in its table with a wrapper (functools.wraps, so the
error names the real rule) that raises TypeError; one rule of each family: a MIL rule (Core ML),
an MLX rule, and a decomposition (legalization, which every backend runs)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.backends.coreml.mil.table import MIL_RULES   # the mil package registers every family
from rlx_jax.backends.mlx.table import MLX_RULES
from rlx_jax.errors import LegalizationError, LoweringError, RefusalError
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.decompose import DECOMPS

X = np.array([[3.0, -1.0, 7.0, 2.0, 0.5], [1.0, 9.0, -4.0, 6.0, 6.5]], np.float32)


def _broken(rule):
    @functools.wraps(rule)
    def bug(*args, **kwargs):
        raise TypeError("injected bug")
    return bug


def _top3(v):
    return lax.top_k(v, 3)[0]


def _cumsum(v):
    return jnp.cumsum(v, axis=1) * 2.0


def _softmax(v):
    return rlx_jax.nn.softmax(v, axis=-1) + 1.0


# (backend, table, kind, fn, the rule's qualified name as the message must give it)
INJECTED = [
    ("coreml", MIL_RULES, K.TopK, _top3, "rlx_jax.backends.coreml.mil.reduce._top_k"),
    ("mlx", MLX_RULES, K.Cumsum, _cumsum, "rlx_jax.backends.mlx.rules_reduce."),
    ("xla", DECOMPS, K.Softmax, _softmax, "rlx_jax.passes.decompose."),
]


def _line_of(fn):
    return f"test_lowering_bugs.py:{fn.__code__.co_firstlineno + 1}"


@pytest.mark.parametrize("fallback", ["host", "error"])
@pytest.mark.parametrize("backend,table,kind,fn,rule", INJECTED,
                         ids=[c[0] + "-" + c[2].name for c in INJECTED])
def test_an_injected_bug_raises_naming_node_line_and_rule(backend, table, kind, fn, rule,
                                                          fallback, monkeypatch, tmp_path):
    if backend not in rlx_jax.available_backends():
        pytest.skip(f"{backend} is not available here")
    # the program is right before the bug is injected (JAX is the oracle)
    want = jax.jit(fn)(X)
    np.testing.assert_allclose(np.asarray(rlx_jax.jit(fn, backend=backend)(X)), want,
                               rtol=1e-6, atol=1e-6)
    # a fresh cache: a package built before the bug would be loaded without lowering anything
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(table, kind, _broken(table[kind]))
    jitted = rlx_jax.jit(fn, backend=backend, fallback=fallback)
    with pytest.raises(LoweringError) as info:
        jitted(X)
    err = info.value
    assert not isinstance(err, RefusalError)
    assert not isinstance(err, LegalizationError)
    assert isinstance(err.__cause__, TypeError) and str(err.__cause__) == "injected bug"
    msg = str(err)
    assert kind.name in msg and "TypeError: injected bug" in msg
    assert _line_of(fn) in msg, msg
    assert rule in msg, msg
    assert "bug in rlx_jax" in msg


@pytest.mark.host("MIL has no bitwise and on int32: the documented refusal under test")
def test_a_refusal_still_goes_to_the_host_and_says_why():
    """The documented refusal (bitwise and on int32 has no MIL op) is the one error that
    places a node on the host; the program still equals JAX."""
    def f(a, b):
        return (a & b) + 1
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.full((3, 4), 6, np.int32)
    jitted = rlx_jax.jit(f, backend="coreml")
    placement = jitted.lower(a, b).placement()
    ops = placement.host_ops()
    assert [n.kind for n, _ in ops] == [K.Binary]
    assert "bitwise" in ops[0][1]
    np.testing.assert_array_equal(np.asarray(jitted(a, b)), np.asarray(jax.jit(f)(a, b)))
    with pytest.raises(LegalizationError, match="bitwise"):
        rlx_jax.jit(f, backend="coreml", fallback="error")(a, b)


def test_an_injected_bug_in_a_refusing_rule_is_not_a_refusal(monkeypatch, tmp_path):
    """A rule that sometimes refuses (Core ML's Binary) still surfaces a bug as a bug: the
    probe that collects refusals catches RefusalError only."""
    def f(a, b):
        return (a & b) + 1
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(MIL_RULES, K.Binary, _broken(MIL_RULES[K.Binary]))
    with pytest.raises(LoweringError, match="injected bug") as info:
        rlx_jax.jit(f, backend="coreml")(a, a)
    assert not isinstance(info.value, RefusalError)
