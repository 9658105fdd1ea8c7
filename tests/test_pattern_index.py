"""The pattern index (passes/pattern_index.py) decides which loose matches run, never what
fires: on every recognised formula, near miss and model of the recognition tests, recognition
offering each node only its indexed candidates gives the program that trying every pattern of
the node's signature gives, with far fewer loose matches."""
import jax
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir.graph import Builder
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes import pattern_index, patterns, recognize_optim
from rlx_jax.passes.pattern_index import Index, key, variants
from rlx_jax.passes.recognize import recognize

from . import test_recognize_models as rm
from . import test_recognize_patterns as rp

pytest.importorskip("flax.linen")


def _every(self, u, uterms=None):
    """Index.candidates without the keys: every (pattern, ranks) of u's root signature."""
    sig = patterns.signature(u)
    hits = [e for table in self.keyed.get(sig, {}).values() for e in table]
    hits += [e[:3] for e in self.sums.get(sig, ())]
    out = {}
    for _, pattern, rank in sorted(hits, key=lambda e: e[0]):
        out.setdefault(pattern, []).append(rank)
    return list(out.items())


class _Everything:
    def __contains__(self, k):
        return True


def _counted(monkeypatch):
    calls = []
    real = patterns.Matcher.root
    monkeypatch.setattr(patterns.Matcher, "root",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def _programs():
    out = {"lm_forward": (rp.lm_forward, (rp.PARAMS, rp.TOKENS)),
           "lm_step": (rp.lm_step, (rp.PARAMS, rp.STATE, rp.TOKENS, rp.LABELS))}
    for name, (made, _) in rp.CASES.items():
        if callable(made):                          # equinox: a test extra
            continue
        fn, makers = made
        args = rp._args(makers)
        out[name] = (jax.value_and_grad(rp._loss(fn, args), argnums=tuple(range(len(args)))),
                     args)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    for name, fn in rp.NEAR_MISSES.items():
        out[f"near_miss_{name}"] = (jax.grad(rp._loss(fn, [x])), (x,))
    for name in ("flax_vit", "swiglu"):
        for prog, made in rm._programs(name).items():
            out[f"{name}_{prog}"] = made
    return out


PROGRAMS = _programs()


@pytest.mark.parametrize("name", PROGRAMS)
def test_index_changes_no_rewrite(name, monkeypatch):
    fn, args = PROGRAMS[name]
    graph = rlx_jax.trace(fn, *args)
    calls = _counted(monkeypatch)
    indexed = recognize(graph).as_text()
    n_indexed = len(calls)
    monkeypatch.setattr(Index, "candidates", _every)
    monkeypatch.setattr(recognize_optim, "variants", lambda u: _Everything())
    calls.clear()
    assert recognize(graph).as_text() == indexed
    assert n_indexed <= len(calls)


def test_index_leaves_most_loose_matches_out(monkeypatch):
    fn, args = PROGRAMS["lm_step"]
    graph = rlx_jax.trace(fn, *args)
    calls = _counted(monkeypatch)
    recognize(graph)
    indexed = len(calls)
    monkeypatch.setattr(Index, "candidates", _every)
    calls.clear()
    recognize(graph)
    assert indexed * 5 < len(calls), (indexed, len(calls))


def test_keys_of_commutative_and_wildcard_operands():
    """A template's key is among the keys of a user node whose operands are swapped (add is
    commutative), and of one whose operand the template's Input stands for."""
    b = Builder()
    x, y = b.input((2, 3), np.float32), b.input((2, 3), np.float32)
    e = b.unary("exp", x)
    template = b.binary("add", e, y)          # exp(x) + Input
    user = b.binary("add", y, b.unary("exp", b.unary("tanh", x)))
    assert key(template) in variants(user)
    assert key(b.binary("sub", e, y)) not in variants(b.binary("sub", y, e))
    assert key(b.binary("mul", e, y)) not in variants(user)
    ints = b.input((2, 3), np.int32)
    assert key(template) not in variants(b.binary("add", ints, ints))   # another dtype class
    assert pattern_index.head(x)[0] is K.Input
