"""Control flow: cond / switch / while_loop / fori_loop / scan / map as If / While / Scan nodes
with regions. The oracle is JAX on CPU; gradients against jax.grad and float64 central
differences. The `xla` backend re-emits them as lax control flow; MLX and Core ML do not lower
them yet and must refuse them by name and source line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.backends.base import get_backend
from rlx_jax.errors import LegalizationError
from rlx_jax.ir.ops import OpKind as K

# the backends that lower control flow (the others must refuse it, see the last test)
CONTROL_FLOW_BACKENDS = [b for b in rlx_jax.available_backends()
                         if K.Scan in get_backend(b).SUPPORTED_OPS]
R = np.random.RandomState(0)
X = R.randn(4, 3).astype(np.float32)
XS = R.randn(5, 2, 3).astype(np.float32)
W = (R.randn(3, 3) * 0.5).astype(np.float32)


def rnn(w, xs):
    def cell(h, x):
        h = jnp.tanh(x @ w + h @ w)
        return h, h.sum()
    h, ys = lax.scan(cell, jnp.zeros((2, 3), xs.dtype), xs)
    return jnp.sum(h) + jnp.sum(ys)


def cond_pred(w, x):
    return jnp.sum(lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a @ w), lambda a: a * 2.0, x))


def switch_clamped(w, x):
    branches = [lambda a: a, lambda a: jnp.cos(a @ w), lambda a: a ** 2]
    i = jnp.int32(jnp.sum(x > 0))            # 0..12, clamped into range by lax.switch
    return jnp.sum(lax.switch(i, branches, x))


def fori_static(w, x):
    return jnp.sum(lax.fori_loop(0, 4, lambda i, c: jnp.tanh(c @ w) + i, x))


def reverse_scan_with_consts(w, xs):
    ys = lax.scan(lambda c, x: (c * 0.5 + jnp.sum(x @ w), x @ w), 1.0, xs, reverse=True)[1]
    return jnp.sum(ys)


def nested(w, xs):
    def outer(c, x):
        inner = lax.scan(lambda d, r: (d + jnp.sin(r @ w), d), c, x[None].repeat(2, 0))[0]
        return lax.cond(jnp.sum(inner) > 0, lambda a: a * 0.5, jnp.cos, inner), jnp.sum(inner)
    c, ys = lax.scan(outer, jnp.zeros((2, 3), xs.dtype), xs)
    return jnp.sum(c) + jnp.sum(ys)


def checkpointed_body(w, xs):
    body = jax.checkpoint(lambda h, x: (jnp.tanh(x @ w + h), jnp.sum(h)))
    h, ys = lax.scan(body, jnp.zeros((2, 3), xs.dtype), xs)
    return jnp.sum(h) + jnp.sum(ys)


def lax_map(w, xs):
    return jnp.sum(lax.map(lambda x: jnp.sin(x @ w), xs))


DIFFERENTIABLE = {
    "scan": (rnn, XS), "cond": (cond_pred, X), "switch": (switch_clamped, X),
    "fori_static": (fori_static, X), "reverse_scan": (reverse_scan_with_consts, XS),
    "nested": (nested, XS), "checkpoint_in_scan": (checkpointed_body, XS), "map": (lax_map, XS),
}


def while_dynamic(x, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.5),
                          (jnp.int32(0), x))[1]


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_forward_and_grad_match_jax_on_xla(name):
    f, x = DIFFERENTIABLE[name]
    got = rlx_jax.jit(f, backend="xla")(W, x)
    np.testing.assert_allclose(got, f(W, x), rtol=1e-5, atol=1e-5)
    g = rlx_jax.jit(jax.grad(f, argnums=(0, 1)), backend="xla")(W, x)
    for a, b in zip(g, jax.grad(f, argnums=(0, 1))(W, x)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["scan", "cond", "nested"])
def test_grad_matches_finite_differences_in_float64(name):
    f, x = DIFFERENTIABLE[name]
    with jax.enable_x64(True):
        w64, x64 = W.astype(np.float64), x.astype(np.float64)
        g = np.asarray(rlx_jax.jit(jax.grad(f), backend="xla")(w64, x64))
        eps, fd = 1e-6, np.zeros_like(w64)
        for idx in np.ndindex(w64.shape):
            d = np.zeros_like(w64)
            d[idx] = eps
            fd[idx] = (float(f(w64 + d, x64)) - float(f(w64 - d, x64))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_while_loop_zero_one_and_many_iterations(n):
    got = rlx_jax.jit(while_dynamic, backend="xla")(X, np.int32(n))
    np.testing.assert_allclose(got, while_dynamic(X, np.int32(n)), rtol=1e-6)


def test_while_loop_forward_mode():
    f = lambda x, t: jax.jvp(lambda a: while_dynamic(a, 3), (x,), (t,))  # noqa: E731
    for a, b in zip(rlx_jax.jit(f, backend="xla")(X, X), f(X, X)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_zero_length_scan_and_pytree_carry():
    def f(xs):
        (a, b), ys = lax.scan(lambda c, x: ((c[0] + x, c[1] * 2), c[0] * 3), (jnp.ones(3), 1.0),
                              xs)
        return a, b, ys
    for xs in (np.zeros((0, 3), np.float32), XS[:, 0]):
        for got, want in zip(rlx_jax.jit(f, backend="xla")(xs), f(xs)):
            np.testing.assert_allclose(got, want)


def test_vmap_of_cond_becomes_a_select():
    f = jax.vmap(lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x))
    lowered = rlx_jax.jit(f, backend="xla").lower(X)
    assert "If" not in lowered.op_counts()
    np.testing.assert_allclose(lowered.compile()(X), f(X), rtol=1e-6)


def test_printed_ir_nests_regions_with_source_lines():
    """Given: a scan whose body holds a cond.
    Result: Scan with one region holding an If with two regions, each printed as a nested
    `{ lambda ... }` block indented under its node, body nodes carrying the user's line."""
    def f(xs):
        return lax.scan(lambda c, x: (lax.cond(x.sum() > 0, jnp.sin, jnp.cos, c + x), None),
                        jnp.zeros(3), xs)[0]
    graph = rlx_jax.trace(f, XS[:, 0])
    scan, = [n for n in graph.nodes if n.kind is K.Scan]
    body, = scan.regions
    assert [n.kind for n in body.nodes if n.kind is K.If] == [K.If]
    counts = graph.op_counts()
    assert counts["Scan"] == 1 and counts["If"] == 1 and counts["Activation"] == 2, counts
    text = graph.as_text()
    lines = text.splitlines()
    scan_at = next(i for i, ln in enumerate(lines) if "= Scan[" in ln)
    assert lines[scan_at + 1].lstrip().startswith("region 0 { lambda ;")
    if_line = next(ln for ln in lines if "= If " in ln)
    assert if_line.startswith("          ")                   # inside the scan body
    assert sum(ln.lstrip().startswith("region ") for ln in lines) == 3
    assert "test_control.py" in if_line


@pytest.mark.parametrize("backend", ["mlx", "coreml"])
def test_backends_without_control_flow_refuse_it_by_name_and_line(backend):
    if backend not in rlx_jax.available_backends():
        pytest.skip(f"{backend} is not available here")
    with pytest.raises(LegalizationError, match=r"Scan.*test_control.py:\d+"):
        rlx_jax.jit(rnn, backend=backend)(W, XS)


# ---- a recurrent language model trained through lax.scan and a fori_loop accumulation ----
def _lm_loss(p, tokens):
    xs, ys = tokens[:, :-1].T, tokens[:, 1:].T

    def cell(h, x):
        h = jnp.tanh(p["emb"][x] + h @ p["wh"])
        return h, h @ p["out"]
    _, logits = lax.scan(cell, jnp.zeros((tokens.shape[0], 8), jnp.float32), xs)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, ys[..., None], axis=-1))


def _lm_step(p, micro):
    def acc(i, g):
        return jax.tree.map(jnp.add, g, jax.grad(_lm_loss)(p, micro[i]))
    g = lax.fori_loop(0, micro.shape[0], acc, jax.tree.map(jnp.zeros_like, p))
    return jax.tree.map(lambda w, d: w - 0.5 * d / micro.shape[0], p, g)


@pytest.mark.parametrize("backend", CONTROL_FLOW_BACKENDS)
def test_rnn_language_model_three_steps_match_jax(backend):
    rng = np.random.default_rng(1)
    p = {"emb": rng.standard_normal((6, 8)).astype(np.float32) * 0.5,
         "wh": rng.standard_normal((8, 8)).astype(np.float32) * 0.3,
         "out": rng.standard_normal((8, 6)).astype(np.float32) * 0.3}
    data = [rng.integers(0, 6, (2, 3, 7)).astype(np.int32) for _ in range(3)]
    step = rlx_jax.jit(_lm_step, backend=backend)
    got, want = p, p
    for micro in data:
        got, want = step(got, micro), jax.jit(_lm_step)(want, micro)
    for k in p:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
