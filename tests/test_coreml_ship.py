"""Shippable Core ML packages: a prefill + decode multifunction package sharing one copy of the
weights, run function by function by the MIL executor for a greedy decode equal to jax.jit's;
compressed weights (int8, palette4) with their report checked against a recomputation; an
app's metadata in the spec; bad input refused by name."""
import os

import coremltools as ct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
from rlx_jax.backends.coreml.package.compress import weight_bytes
from rlx_jax.errors import BadArgumentError

V, D, T = 128, 64, 32           # vocabulary, width, cache length (every weight above
#                                 coremltools' 2,048-element compression threshold)


def _params():
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    n = lambda key, *s: jax.random.normal(key, s, jnp.float32) / np.sqrt(s[0])  # noqa: E731
    return {"emb": n(k[0], V, D), "wq": n(k[1], D, D), "wk": n(k[2], D, D),
            "wv": n(k[3], D, D), "w1": n(k[4], D, 4 * D), "w2": n(k[5], 4 * D, D)}


P = _params()


def _block(h, keys, values, valid):
    """One decoder layer over positions `valid` of the cache; returns logits."""
    q = h @ P["wq"]
    s = jnp.where(valid, q @ keys.T / np.sqrt(D), -1e9)
    h = h + jax.nn.softmax(s, axis=-1) @ values
    h = h + jax.nn.gelu(h @ P["w1"]) @ P["w2"]
    return h @ P["emb"].T


def prefill(tokens):
    """tokens [7] -> (logits [7, V], keys [T, D], values [T, D])."""
    h = P["emb"][tokens]
    n = tokens.shape[0]
    keys = jnp.zeros((T, D)).at[:n].set(h @ P["wk"])
    values = jnp.zeros((T, D)).at[:n].set(h @ P["wv"])
    valid = jnp.arange(T)[None, :] <= jnp.arange(n)[:, None]
    return _block(h, keys, values, valid), keys, values


def decode(token, pos, keys, values):
    """token [1] int32, pos [1] int32 -> (logits [1, V], keys, values)."""
    h = P["emb"][token]
    keys = jax.lax.dynamic_update_slice(keys, h @ P["wk"], (pos[0], 0))
    values = jax.lax.dynamic_update_slice(values, h @ P["wv"], (pos[0], 0))
    return _block(h, keys, values, jnp.arange(T)[None, :] <= pos[0]), keys, values


PROMPT = np.array([3, 14, 15, 9, 26, 5, 35], np.int32)
EXAMPLE_DECODE = (np.zeros(1, np.int32), np.array([7], np.int32), np.zeros((T, D), np.float32),
                  np.zeros((T, D), np.float32))


def _greedy(run_prefill, run_decode, steps=16):
    logits, keys, values = run_prefill(PROMPT)
    token = int(np.argmax(np.asarray(logits)[-1]))
    tokens, all_logits = [token], []
    for i in range(steps):
        logits, keys, values = run_decode(np.array([token], np.int32),
                                          np.array([len(PROMPT) + i], np.int32), keys, values)
        all_logits.append(np.asarray(logits))
        token = int(np.argmax(all_logits[-1][-1]))
        tokens.append(token)
    return tokens, np.stack(all_logits)


def _by_name(ex, names_values):
    out = ex(dict(zip(ex.input_names, names_values)))
    return [out[n] for n in ex.output_names]


def test_a_prefill_and_decode_multifunction_package(tmp_path):
    path = rlx_jax.export_coreml({"prefill": (prefill, (PROMPT,)),
                                  "decode": (decode, EXAMPLE_DECODE)},
                                 path=str(tmp_path / "lm.mlpackage"), default_function="decode",
                                 author="rlx_jax tests", version="0.1")
    spec = ct.utils.load_spec(path)
    assert sorted(f.name for f in spec.description.functions) == ["decode", "prefill"]
    assert spec.description.defaultFunctionName == "decode"
    assert spec.description.metadata.author == "rlx_jax tests"
    single = rlx_jax.export_coreml(decode, *EXAMPLE_DECODE, path=str(tmp_path / "d.mlpackage"))
    # the functions share the weights: one copy, not two
    assert weight_bytes(path) < 1.2 * weight_bytes(single)
    pre = MilReferenceExecutor(path, function_name="prefill")
    dec = MilReferenceExecutor(path)                     # the default function
    assert dec.function_name == "decode"
    got_tokens, got = _greedy(lambda t: _by_name(pre, [t]), lambda *a: _by_name(dec, list(a)))
    want_tokens, want = _greedy(jax.jit(prefill), jax.jit(decode))
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(BadArgumentError, match=r"no function 'generate'; its functions are "
                                               r"\['decode', 'prefill'\]"):
        MilReferenceExecutor(path, function_name="generate")


# weight-byte ratio at most, and each output's error against JAX at most this fraction of its
# largest magnitude (measured: int8 0.0087, palette4 0.19; docs/coreml-export.md's table)
@pytest.mark.parametrize("weights, most, rel", [("int8", 0.3, 0.02), ("palette4", 0.15, 0.25)])
def test_compressed_weights_and_their_report(tmp_path, weights, most, rel):
    x = np.asarray(PROMPT)
    float_path = rlx_jax.export_coreml(prefill, x, path=str(tmp_path / "f.mlpackage"))
    path = rlx_jax.export_coreml(prefill, x, path=str(tmp_path / f"{weights}.mlpackage"),
                                 weights=weights)
    report = rlx_jax.compression_report(path)
    assert report["bytes_float"] == weight_bytes(float_path)
    assert report["bytes"] == weight_bytes(path)
    assert report["bytes"] <= most * report["bytes_float"]
    ops = {op.op_type for op in MilReferenceExecutor(path).ops}
    assert any(o.startswith("constexpr_") for o in ops)
    # the report's error is the executor's, recomputed here
    got = _by_name(MilReferenceExecutor(path), [x])
    want = _by_name(MilReferenceExecutor(float_path), [x])
    ex = MilReferenceExecutor(path)
    for name, g, w in zip(ex.output_names, got, want):
        assert report["max_abs_error"][name] == pytest.approx(float(np.max(np.abs(g - w))))
    # against JAX: the float export equals it, the compressed one is within its bound
    for g, w, j in zip(got, want, jax.jit(prefill)(x)):
        j = np.asarray(j)
        np.testing.assert_allclose(w, j, rtol=1e-5, atol=1e-5)
        assert np.max(np.abs(g - j)) <= rel * np.max(np.abs(j))
    assert rlx_jax.compression_report(float_path) is None


def test_an_apps_metadata(tmp_path):
    path = rlx_jax.export_coreml(prefill, PROMPT, path=str(tmp_path / "m.mlpackage"),
                                 author="A. Author", version="2.1", license="MIT",
                                 description="a tiny decoder's prefill",
                                 input_descriptions={"tokens": "prompt token ids"},
                                 output_descriptions={"output_0": "logits"})
    model = ct.models.MLModel(path, skip_model_load=True)
    assert (model.author, model.version, model.license, model.short_description) == \
        ("A. Author", "2.1", "MIT", "a tiny decoder's prefill")
    assert model.input_description["tokens"] == "prompt token ids"
    assert model.output_description["output_0"] == "logits"


def test_bad_shipping_options_are_refused(tmp_path):
    at = str(tmp_path / "x.mlpackage")
    with pytest.raises(BadArgumentError, match="weights='int3'"):
        rlx_jax.export_coreml(prefill, PROMPT, path=at, weights="int3")
    with pytest.raises(BadArgumentError, match="minimum_deployment_target='iOS18'"):
        rlx_jax.export_coreml(prefill, PROMPT, path=at, weights="int4")
    with pytest.raises(BadArgumentError, match="multifunction package needs "
                                               "minimum_deployment_target='iOS18'"):
        rlx_jax.export_coreml({"a": (prefill, (PROMPT,))}, path=at,
                              minimum_deployment_target="iOS17")
    with pytest.raises(BadArgumentError, match="input_descriptions names 'x'; the model's "
                                               r"inputs are \['tokens'\]"):
        rlx_jax.export_coreml(prefill, PROMPT, path=at, input_descriptions={"x": "?"})
    assert not os.path.exists(at)


# ---- the KV cache as Core ML state: float16 (Core ML's only state dtype), in the function too
def prefill16(tokens, keys, values):
    logits, k, v = prefill(tokens)
    return logits, k.astype(jnp.float16), v.astype(jnp.float16)


def decode16(token, pos, keys, values):
    logits, k, v = decode(token, pos, keys.astype(jnp.float32), values.astype(jnp.float32))
    return logits, k.astype(jnp.float16), v.astype(jnp.float16)


CACHE16 = (np.zeros((T, D), np.float16), np.zeros((T, D), np.float16))


def test_a_stateful_prefill_and_decode_package(tmp_path):
    state = {"keys": "output_1", "values": "output_2"}
    path = rlx_jax.export_coreml({"prefill": (prefill16, (PROMPT, *CACHE16)),
                                  "decode": (decode16, (*EXAMPLE_DECODE[:2], *CACHE16))},
                                 path=str(tmp_path / "lm.mlpackage"), state=state)
    spec = ct.utils.load_spec(path)
    for f in spec.description.functions:
        assert sorted(s.name for s in f.state) == ["keys", "values"]
        assert [o.name for o in f.output] == ["output_0"]
        assert "keys" not in [i.name for i in f.input]
    for name in ("prefill", "decode"):         # coremltools loads each function by name
        assert ct.models.MLModel(path, skip_model_load=True,
                                 function_name=name).function_name == name
    pre = MilReferenceExecutor(path, function_name="prefill")
    dec = MilReferenceExecutor(path, function_name="decode")
    kv = pre.make_state()
    assert np.isnan(kv["keys"]).all()           # nothing written yet

    def run_prefill(tokens):
        return [pre({"tokens": tokens}, state=kv)["output_0"], None, None]

    def run_decode(token, pos, keys, values):
        return [dec({"token": token, "pos": pos}, state=kv)["output_0"], None, None]
    got_tokens, got = _greedy(run_prefill, run_decode)
    cache = tuple(jnp.asarray(c) for c in CACHE16)
    want_tokens, want = _greedy(lambda t: jax.jit(prefill16)(t, *cache), jax.jit(decode16))
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(BadArgumentError, match=r"call it with state=executor\.make_state\(\)"):
        dec({"token": np.zeros(1, np.int32), "pos": np.zeros(1, np.int32)})


def test_bad_state_pairs_are_refused(tmp_path):
    at, args = str(tmp_path / "s.mlpackage"), (*EXAMPLE_DECODE[:2], *CACHE16)
    target = {"minimum_deployment_target": "iOS18"}
    with pytest.raises(BadArgumentError, match=r"state pairs 'keys' with 'output_9'; the "
                                               r"model's outputs are \['output_0'"):
        rlx_jax.export_coreml(decode16, *args, path=at, state={"keys": "output_9"}, **target)
    with pytest.raises(BadArgumentError, match=r"state 'keys' is f16\[32,64\] but its new value "
                                               r"'output_0' is f32\[1,128\]"):
        rlx_jax.export_coreml(decode16, *args, path=at, state={"keys": "output_0"}, **target)
    with pytest.raises(BadArgumentError, match=r"state 'keys' is f32\[32,64\]; Core ML keeps "
                                               r"float16 states only"):
        rlx_jax.export_coreml(decode, *EXAMPLE_DECODE, path=at,
                              state={"keys": "output_1"}, **target)
    with pytest.raises(BadArgumentError, match=r"state= needs minimum_deployment_target="
                                               r"'iOS18'"):
        rlx_jax.export_coreml(decode16, *args, path=at, state={"keys": "output_1"})
