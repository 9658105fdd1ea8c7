"""The on-disk cache of traced pattern graphs (passes/template_cache.py): a cached graph is the
traced one, with fresh value ids; a damaged entry is traced again; the cache can be turned off;
its directory changes with the library versions; every reference has a name of its own. Its
area "types": shape inference's results read back by a later process, for plain signatures."""
import glob
import importlib.metadata

import jax
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir import prng, shapes
from rlx_jax.ir.graph import Builder
from rlx_jax.ir.ops import OpKind
from rlx_jax.passes import template_cache
from rlx_jax.passes.pattern_refs import R
from rlx_jax.passes.optim_refs import OPTIMIZERS


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(template_cache.ENV, raising=False)
    return tmp_path


def _key_and_types(ref, rank=2):
    ex = ref.example(rank)
    types = tuple((tuple(ex[n][0]), np.dtype(ex[n][1])) for n in ref.inputs)
    params = tuple(sorted(ref.params.items()))
    return (ref.name, ref.inputs, types, params), types, params


def test_cached_graph_is_the_traced_one_with_fresh_ids(cache_root):
    ref = R["ln_vjp"]
    key, types, params = _key_and_types(ref)
    traced = ref.trace(types, params)
    template_cache.store(key, traced)
    a, b = template_cache.load(key), template_cache.load(key)
    assert a.as_text() == b.as_text() == traced.as_text()
    ids = [v.id for g in (a, b, traced) for n in g.nodes for v in n.outputs]
    assert len(ids) == len(set(ids))                 # no value shares an id with another


def test_damaged_entry_is_traced_again(cache_root):
    ref = R["softmax"]
    key, types, params = _key_and_types(ref)
    template_cache.store(key, ref.trace(types, params))
    with open(template_cache.path(key), "wb") as f:
        f.write(b"not a pickle")
    assert template_cache.load(key) is template_cache.MISSING
    ref.graph.cache_clear()                          # the in-process cache: forget it
    assert ref.graph(types, params).as_text() == ref.trace(types, params).as_text()
    assert template_cache.load(key) is not template_cache.MISSING


def test_cache_can_be_turned_off(cache_root, monkeypatch):
    ref = R["softmax"]
    key, types, params = _key_and_types(ref)
    template_cache.store(key, ref.trace(types, params))
    monkeypatch.setenv(template_cache.ENV, "0")
    assert template_cache.load(key) is template_cache.MISSING


def test_directory_follows_library_versions(monkeypatch):
    before = template_cache.digest()
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda lib: "0.0.1" if lib == "flax" else real(lib))
    template_cache.digest.cache_clear()
    try:
        assert template_cache.digest() != before
    finally:
        monkeypatch.undo()
        template_cache.digest.cache_clear()
    assert template_cache.digest() == before


def test_every_reference_has_its_own_name():
    names = [r.name for r in R.values()] + [r.name for o in OPTIMIZERS for r in o.refs]
    assert len(names) == len(set(names))


def test_a_refused_trace_is_not_cached(cache_root):
    """A reference whose library cannot be imported in this process traces to None; that is
    not stored, so a process where the import works traces it."""
    from rlx_jax.passes.patterns import Reference

    def needs_missing_library(x):
        import not_an_installed_library  # noqa: F401
        return (x,)
    ref = Reference("test: a formula of a missing library", needs_missing_library, "x",
                    lambda r: {"x": ((2, 3), np.float32)})
    key, types, params = _key_and_types(ref)
    assert ref.graph(types, params) is None
    assert template_cache.load(key) is template_cache.MISSING


# ---- inferred types (ir/shapes.py keeps them in the area "types") ----

def _types_entries(root):
    return glob.glob(str(root / "types" / "*" / "*.pkl"))


def test_inferred_types_are_read_back_by_a_later_process(cache_root, monkeypatch):
    """A signature inferred once is stored; a process that has not inferred it (an empty
    memo) reads it back instead of evaluating the reference again."""
    monkeypatch.setattr(shapes, "_CACHE", {})
    b = Builder()
    x = b.input((2, 3), np.float32)
    assert b.unary("exp", x).type_str() == "f32[2,3]"
    assert len(_types_entries(cache_root)) == 1
    monkeypatch.setattr(shapes, "_CACHE", {})
    monkeypatch.setattr(shapes, "_infer", lambda node: pytest.fail("inferred again"))
    assert b.unary("exp", x).type_str() == "f32[2,3]"
    b.graph.outputs = [b.graph.nodes[-1].out]
    b.graph.verify()


def test_only_plain_signatures_are_stored(cache_root, monkeypatch):
    """A NaN attribute, a PRNG key dtype (its meaning is this process's registry) or an
    object with an arbitrary repr is not plain data: such signatures stay in the memo."""
    key = (OpKind.Binary, (("fn", "add"),), (((2,), np.dtype(np.float32)),) * 2, False)
    assert shapes._plain(key)
    assert not shapes._plain((OpKind.Pad, (("value", float("nan")),), (), False))
    assert not shapes._plain((OpKind.RandomBits, (), (((2,), prng.KEY),), False))
    assert not shapes._plain((OpKind.HostPrimitive, (("primitive", object()),), (), False))
    monkeypatch.setattr(shapes, "_CACHE", {})
    g = rlx_jax.trace(lambda k: jax.random.split(k), jax.random.key(0))
    assert g.nodes and not _types_entries(cache_root)


def test_inferred_types_follow_the_cache_switch(cache_root, monkeypatch):
    monkeypatch.setenv(template_cache.ENV, "0")
    monkeypatch.setattr(shapes, "_CACHE", {})
    Builder().unary("exp", Builder().input((4,), np.float32))
    assert not _types_entries(cache_root)
