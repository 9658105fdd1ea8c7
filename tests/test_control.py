"""Control flow: cond / switch / while_loop / fori_loop / scan / map as If / While / Scan nodes
with regions. The oracle is JAX on CPU; gradients against jax.grad and float64 central
differences. The `xla` backend re-emits them as lax control flow; Core ML lowers them to MIL
cond / while_loop (checked here through the MIL reference executor, float32 NumPy); MLX does
not lower them yet and must refuse them by name and source line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.errors import LegalizationError
from rlx_jax.ir.ops import OpKind as K

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


def _needs(backend):
    if backend not in rlx_jax.available_backends():
        pytest.skip(f"{backend} is not available here")


# float32 on both; the Core ML executor is float32 NumPy, op by op (rtol 1e-4 / atol 1e-5)
TOL = {"xla": dict(rtol=1e-5, atol=1e-5), "coreml": dict(rtol=1e-4, atol=1e-5)}


@pytest.mark.parametrize("backend", ["xla", "coreml"])
@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_forward_and_grad_match_jax(name, backend):
    _needs(backend)
    f, x = DIFFERENTIABLE[name]
    got = rlx_jax.jit(f, backend=backend)(W, x)
    np.testing.assert_allclose(got, f(W, x), **TOL[backend])
    g = rlx_jax.jit(jax.grad(f, argnums=(0, 1)), backend=backend)(W, x)
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


@pytest.mark.parametrize("backend", ["xla", "coreml"])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_while_loop_zero_one_and_many_iterations(n, backend):
    _needs(backend)
    got = rlx_jax.jit(while_dynamic, backend=backend)(X, np.int32(n))
    np.testing.assert_allclose(got, while_dynamic(X, np.int32(n)), rtol=1e-5, atol=1e-6)


def test_while_loop_forward_mode():
    f = lambda x, t: jax.jvp(lambda a: while_dynamic(a, 3), (x,), (t,))  # noqa: E731
    for a, b in zip(rlx_jax.jit(f, backend="xla")(X, X), f(X, X)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["xla", "coreml"])
def test_zero_length_scan_and_pytree_carry(backend):
    _needs(backend)

    def f(xs):
        (a, b), ys = lax.scan(lambda c, x: ((c[0] + x, c[1] * 2), c[0] * 3), (jnp.ones(3), 1.0),
                              xs)
        return a, b, ys
    for xs in (np.zeros((0, 3), np.float32), XS[:, 0]):
        got = rlx_jax.jit(f, backend=backend)(xs)
        for a, b in zip(got, f(xs)):
            assert np.shape(a) == np.shape(b)
            np.testing.assert_allclose(a, b, rtol=1e-6)


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


@pytest.mark.parametrize("backend", ["mlx"])
def test_backends_without_control_flow_refuse_it_by_name_and_line(backend):
    if backend not in rlx_jax.available_backends():
        pytest.skip(f"{backend} is not available here")
    with pytest.raises(LegalizationError, match=r"Scan.*test_control.py:\d+"):
        rlx_jax.jit(rnn, backend=backend)(W, XS)


# ---- Core ML: structure of the MIL program (op types, nested blocks included) ----

def _mil_ops(f, *args):
    _needs("coreml")
    return rlx_jax.jit(f, backend="coreml").lower(*args).op_counts(level="backend")


def test_coreml_scan_is_one_while_loop_writing_ys_with_scatter_nd():
    """Given: lax.scan of an RNN cell over 5 steps, carry f32[2,3], y a scalar per step.
    Result: one while_loop (not unrolled): the step reads x with one gather, writes y into its
    [5] buffer with one scatter_nd, and the body's own ops (2 matmul, tanh) appear once."""
    counts = _mil_ops(rnn, W, XS)
    assert counts["while_loop"] == 1 and counts["gather"] == 1, counts
    assert counts["scatter_nd"] == 1 and counts["matmul"] == 2 and counts["tanh"] == 1, counts
    assert "cond" not in counts and "slice_update" not in counts, counts


def test_coreml_switch_is_nested_conds_on_the_index():
    """Given: lax.switch over 3 branches.
    Result: 2 nested cond ops, each testing index <= k with less_equal; no select."""
    counts = _mil_ops(switch_clamped, W, X)
    assert counts["cond"] == 2 and counts["less_equal"] == 2, counts
    assert "select" not in counts and "while_loop" not in counts, counts


def test_coreml_cond_is_one_cond():
    """Given: lax.cond on a traced predicate.
    Result: one cond with the true branch's matmul and sin inside it."""
    counts = _mil_ops(cond_pred, W, X)
    assert counts["cond"] == 1 and counts["matmul"] == 1 and counts["sin"] == 1, counts


def test_coreml_while_is_one_while_loop():
    """Given: lax.while_loop with a traced bound.
    Result: one while_loop whose cond block compares with less and whose body holds the sin;
    no scatter (no stacked outputs)."""
    counts = _mil_ops(while_dynamic, X, np.int32(3))
    assert counts["while_loop"] == 1 and counts["less"] == 1 and counts["sin"] == 1, counts
    assert "scatter_nd" not in counts, counts


def test_coreml_zero_length_scan_builds_no_loop():
    """Given: a scan over xs: f32[0,3] with a carry.
    Result: the scan is folded to its initial carry before lowering: no while_loop."""
    def f(xs, c):
        return lax.scan(lambda c, x: (c + x, c), c, xs)
    counts = _mil_ops(f, np.zeros((0, 3), np.float32), np.ones(3, np.float32))
    assert "while_loop" not in counts, counts


def test_coreml_region_values_are_checked_like_top_level_ones():
    """Given: a scan whose body computes in float64 (x64 on).
    Result: a LoweringError naming the f64 value, the Cast inside the body and its line."""
    _needs("coreml")
    from rlx_jax.errors import RlxError
    with jax.enable_x64(True):
        def f(xs):
            body = lambda c, x: (c + jnp.sin(x.astype(jnp.float64)).sum().astype(  # noqa: E731
                jnp.float32), None)
            return lax.scan(body, jnp.float32(0), xs)[0]
        with pytest.raises(RlxError, match=r"f64\[3\] produced by Cast(.|\n)*test_control.py"):
            rlx_jax.jit(f, backend="coreml")(XS[:, 0])


@pytest.mark.parametrize("backend", ["xla", "coreml"])
def test_scan_with_bool_and_int_ys_and_a_cond_in_a_while(backend):
    """bool ys (buffered as int32 on Core ML), int32 ys, a scalar x slice, reverse; and a cond
    inside a while body."""
    _needs(backend)

    def f(xs, n):
        c, (pos, cnt) = lax.scan(lambda c, x: (c + x, (x > 0, jnp.int32(c > 0))), 0.0, xs,
                                 reverse=True)
        w = lax.while_loop(lambda s: s[0] < n,
                           lambda s: (s[0] + 1, lax.cond(s[1].sum() > 0, jnp.cos, jnp.sin,
                                                         s[1])), (jnp.int32(0), xs))[1]
        return c, pos, cnt, w
    xs, n = XS[:, 0, 0], np.int32(3)
    for a, b in zip(rlx_jax.jit(f, backend=backend)(xs, n), f(xs, n)):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)



def _scan_with_region_constant(k):
    from rlx_jax.ir.graph import Builder, Graph
    body = Builder(Graph("body"))
    c, _ = body.input((64,), np.float32), body.input((3,), np.float32)
    body.graph.outputs = [body.binary("add", c, body.const(np.full((64,), k, np.float32)))]
    b = Builder(Graph("f"))
    c0, xs = b.input((64,), np.float32), b.input((5, 3), np.float32)
    b.graph.outputs = [b.add(K.Scan, (c0, xs), dict(length=5, reverse=False, num_consts=0,
                                                     num_carry=1, unroll=1),
                             regions=[body.graph])]
    return b.graph.verify()


def test_coreml_package_hash_sees_constants_inside_regions():
    """Given: two scans that differ only in an array constant inside the body (printed alike,
    `<f32[64]>`).
    Result: different package hashes, and each package gives its own result."""
    _needs("coreml")
    from rlx_jax.backends.base import get_backend
    from rlx_jax.backends.coreml import package
    g1, g2 = _scan_with_region_constant(1.0), _scan_with_region_constant(2.0)
    assert g1.as_text() == g2.as_text()
    opts = package.Options()
    assert package.graph_hash(g1, opts) != package.graph_hash(g2, opts)
    coreml, c0 = get_backend("coreml"), np.zeros(64, np.float32)
    for k, g in ((1.0, g1), (2.0, g2)):
        out, = coreml.lower(g)(c0, XS[:, 0])
        np.testing.assert_allclose(out, np.full(64, 5 * k), rtol=1e-6)


def test_coreml_rank_rewrite_reaches_into_regions():
    """Given: a scan body tiling f32[2,3,4] by (2,1,3) (JAX broadcasts through rank 6).
    Result: the region is rewritten at rank <= 5 like a top-level graph (rank_control.py), and
    matches JAX."""
    _needs("coreml")
    xs = R.randn(5, 2, 3, 4).astype(np.float32)

    def f(xs):
        return lax.scan(lambda c, x: (c + jnp.tile(x, (2, 1, 3)), None), jnp.zeros((4, 3, 12)),
                        xs)[0]
    np.testing.assert_allclose(rlx_jax.jit(f, backend="coreml")(xs), f(xs), rtol=1e-6)


def _outer_as_carry(x, w, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, w, c[1] + 1.0),
                          (jnp.int32(0), x, x))


def _constant_carry(x, w, n):
    return lax.while_loop(lambda c: c[0] < n,
                          lambda c: (c[0] + 1, jnp.zeros_like(c[1]), c[1] + 1.0),
                          (jnp.int32(0), x, w))


def _swapped_carry(x, w, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[2], c[1]),
                          (jnp.int32(0), x, w))


def _scan_constant_carry(x, w, n):
    return lax.scan(lambda c, r: (jnp.ones_like(c), c + r), x, jnp.stack([w] * 3))


@pytest.mark.parametrize("backend", ["xla", "coreml"])
@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("f", [_outer_as_carry, _constant_carry, _swapped_carry,
                               _scan_constant_carry], ids=lambda f: f.__name__.strip("_"))
def test_loop_carries_replaced_by_outer_values_constants_or_each_other(f, n, backend):
    """Bodies whose results are an outer value, a constant (coremltools' while_loop builder
    refuses a body result it knows the value of), or another carry."""
    _needs(backend)
    for a, b in zip(rlx_jax.jit(f, backend=backend)(X, W[:1] * X, np.int32(n)),
                    f(X, W[:1] * X, np.int32(n))):
        np.testing.assert_allclose(a, b, rtol=1e-6)
