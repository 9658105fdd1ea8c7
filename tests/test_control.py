"""Control flow: cond / switch / while_loop / fori_loop / scan / map as If / While / Scan nodes
with regions. The oracle is JAX on CPU; gradients against jax.grad and float64 central
differences. The `xla` backend re-emits them as lax control flow; MLX lowers them (If as a
select, While and long Scans as host loops, short Scans unrolled: backends/mlx/rules_control.py),
compiled and eager (`compile=False`) alike; Core ML lowers them to MIL cond / while_loop (checked
here through the MIL reference executor, float32 NumPy)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax

import rlx_jax
from rlx_jax.errors import LoweringError
from rlx_jax.ir.ops import OpKind as K

from .conftest import BACKENDS

# (backend, options): xla; mlx compiled (mx.compile, segments around host loops) and eager;
# coreml (MIL cond / while_loop, run by the MIL reference executor on Linux)
CONFIGS = ([("xla", {})] + ([("mlx", {}), ("mlx", {"compile": False})] if "mlx" in BACKENDS
                            else []) + ([("coreml", {})] if "coreml" in BACKENDS else []))
CONFIG_IDS = [b + ("-eager" if o else "") for b, o in CONFIGS]
configs = pytest.mark.parametrize("backend,options", CONFIGS, ids=CONFIG_IDS)
needs_mlx = pytest.mark.skipif("mlx" not in BACKENDS, reason="mlx is not installed")

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


@configs
@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_forward_and_grad_match_jax(name, backend, options):
    f, x = DIFFERENTIABLE[name]
    got = rlx_jax.jit(f, backend=backend, **options)(W, x)
    np.testing.assert_allclose(got, f(W, x), rtol=1e-4, atol=1e-5)
    g = rlx_jax.jit(jax.grad(f, argnums=(0, 1)), backend=backend, **options)(W, x)
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


@configs
@pytest.mark.parametrize("n", [0, 1, 3])
def test_while_loop_zero_one_and_many_iterations(n, backend, options):
    got = rlx_jax.jit(while_dynamic, backend=backend, **options)(X, np.int32(n))
    np.testing.assert_allclose(got, while_dynamic(X, np.int32(n)), rtol=1e-6, atol=1e-7)


@configs
def test_while_loop_forward_mode(backend, options):
    f = lambda x, t: jax.jvp(lambda a: while_dynamic(a, 3), (x,), (t,))  # noqa: E731
    for a, b in zip(rlx_jax.jit(f, backend=backend, **options)(X, X), f(X, X)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@configs
def test_scan_over_bool_xs_and_ys(backend, options):
    """bool slices in and out of a scan (the residual masks of jax.grad of a custom_jvp relu
    scanned under vmap: JAX's test_hard_stuff3; MIL's gather takes no bool)."""
    def f(x, mask):
        def body(c, m):
            c = jnp.where(m, c + 1.0, c * 0.5)
            return c, (m & (c > 1.0), c)
        return lax.scan(body, x, mask)
    mask = np.array([[True, False, True], [False, False, True], [True, True, False]] * 2)
    x = np.array([0.5, 2.0, -1.0], np.float32)
    got, want = rlx_jax.jit(f, backend=backend, **options)(x, mask), jax.jit(f)(x, mask)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@configs
def test_zero_length_scan_and_pytree_carry(backend, options):
    def f(xs):
        (a, b), ys = lax.scan(lambda c, x: ((c[0] + x, c[1] * 2), c[0] * 3), (jnp.ones(3), 1.0),
                              xs)
        return a, b, ys
    for xs in (np.zeros((0, 3), np.float32), XS[:, 0]):
        got = rlx_jax.jit(f, backend=backend, **options)(xs)
        for g, want in zip(got, f(xs)):
            assert g.shape == want.shape and g.dtype == want.dtype
            np.testing.assert_allclose(g, want)


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


# ---- MLX: how each kind lowers (backends/mlx/rules_control.py), asserted structurally ----
def _executable(jitted):
    return next(iter(jitted._cache.values())).executable


def tanh_rnn(w, xs):
    return lax.scan(lambda h, x: (jnp.tanh(x @ w + h), h.sum()), jnp.zeros(3, xs.dtype), xs)


@needs_mlx
def test_mlx_short_scan_is_unrolled_long_scan_is_a_host_loop():
    """Given: the same tanh RNN scan over 4 steps and over 600 steps (body: DotGeneral, Binary,
    Activation, Reduce, i.e. 600 * 4 > UNROLL_MAX).
    Result: the short one unrolled (the backend program holds 4 tanh, one per step), the long one
    a host loop over its compiled body (the program holds its body once: 1 tanh); both match
    JAX, and the long one's graph runs as compiled segments around the loop."""
    from rlx_jax.backends.mlx.rules_control import UNROLL_MAX
    w = W[0]
    for length, choice, tanhs in ((4, "unrolled", 4), (600, "host loop", 1)):
        xs = R.randn(length, 3).astype(np.float32)
        f = rlx_jax.jit(lambda w, xs: tanh_rnn(w * np.eye(3, dtype=np.float32), xs),
                        backend="mlx")
        lowered = f.lower(w, xs)
        scan, = [n for n in lowered.legalized.walk() if n.kind is K.Scan]
        assert (length * 4 <= UNROLL_MAX) == (choice == "unrolled")
        assert lowered.op_counts(level="backend")["Tanh"] == tanhs
        for got, want in zip(f(w, xs), tanh_rnn(w * np.eye(3, dtype=np.float32), xs)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        exe = _executable(f)
        assert [p[2] for p in exe.plan] == [choice]
        assert exe.segments == (None if choice == "unrolled" else ["compiled", "host"])


@needs_mlx
@pytest.mark.parametrize("unroll_max", [None, -1], ids=["unrolled", "host-loop"])
@pytest.mark.parametrize("compile", [True, False], ids=["compiled", "eager"])
def test_mlx_reverse_scan_writes_ys_in_place(unroll_max, compile, monkeypatch):
    """Given: a reverse scan whose ys are returned as they are (ys[t] = x[t] + carry after the
    steps t+1..n-1), with the scan unrolled and forced into a host loop.
    Result: ys equal lax.scan's element by element, final carry too, gradients as jax.grad."""
    from rlx_jax.backends.mlx import rules_control
    if unroll_max is not None:
        monkeypatch.setattr(rules_control, "UNROLL_MAX", unroll_max)

    def f(w, xs):
        return lax.scan(lambda c, x: (c * 0.5 + x @ w, (x @ w + c, jnp.sum(c))),
                        jnp.ones(3), xs[:, 0], reverse=True)
    f_mlx = rlx_jax.jit(f, backend="mlx", compile=compile)
    for got, want in zip(jax.tree.leaves(f_mlx(W, XS)), jax.tree.leaves(f(W, XS))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert [p[2] for p in _executable(f_mlx).plan] == [
        "host loop" if unroll_max is not None else "unrolled"]
    loss = lambda w, xs: jnp.sum(f(w, xs)[1][0] ** 2)  # noqa: E731
    got = rlx_jax.jit(jax.grad(loss), backend="mlx", compile=compile)(W, XS)
    np.testing.assert_allclose(got, jax.grad(loss)(W, XS), rtol=1e-4, atol=1e-5)


@needs_mlx
def test_mlx_while_cuts_the_graph_into_compiled_segments():
    """Given: work before a while_loop, the loop (data-dependent trip count), work after it.
    Result: compiled, the executable runs [compiled, host, compiled] segments; with
    compile=False it runs eagerly in one piece; both match JAX for 0, 1 and 5 iterations."""
    def f(x, n):
        y = jnp.sin(x) * 2.0
        i, y = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jnp.cos(c[1]) + y.sum()),
                              (jnp.int32(0), y))
        return jnp.exp(-y) + i
    for compile, segments in ((True, ["compiled", "host", "compiled"]), (False, None)):
        g = rlx_jax.jit(f, backend="mlx", compile=compile)
        for n in (0, 1, 5):
            np.testing.assert_allclose(g(X, np.int32(n)), f(X, np.int32(n)), rtol=1e-5,
                                       atol=1e-6)
        exe = _executable(g)
        assert exe.segments == segments and [p[2] for p in exe.plan] == ["host loop"]
        assert exe.runtime == ("mlx-compiled" if compile else "mlx-eager")


@needs_mlx
@pytest.mark.parametrize("compile", [True, False], ids=["compiled", "eager"])
def test_mlx_while_inside_a_scan_body(compile):
    """Given: a scan whose body runs a while_loop with a data-dependent trip count.
    Result: the scan is a host loop (its body cannot be one compiled function) whose body is
    itself cut into compiled segments around the while; values match JAX."""
    def f(xs):
        def body(c, x):
            k = jnp.int32(jnp.abs(x.sum()) * 3)
            _, c = lax.while_loop(lambda s: s[0] < k, lambda s: (s[0] + 1, jnp.sin(s[1]) + x),
                                  (jnp.int32(0), c))
            return c, k
        return lax.scan(body, jnp.zeros(3), xs)
    g = rlx_jax.jit(f, backend="mlx", compile=compile)
    for got, want in zip(g(XS[:, 0]), f(XS[:, 0])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert [p[2] for p in _executable(g).plan] == ["host loop", "host loop"]


@needs_mlx
def test_mlx_if_selects_without_leaking_the_untaken_branch():
    """Given: cond(x > 0, log, neg) and a 3-way switch whose branches give NaN and Inf for these
    inputs when not taken.
    Result: If lowers as a select (the backend program computes every branch: Log and Negative
    both present) and no NaN or Inf of an untaken branch reaches the result."""
    def f(x):
        a = lax.cond(jnp.sum(x) > 0, jnp.log, lambda v: -v, x)           # log(-1): NaN
        b = lax.switch(jnp.int32(x[0] < 0) + 1,                      # 2
                       [lambda v: v / 0.0, lambda v: jnp.log(v), lambda v: v * 2], x)
        return a, b
    x = -np.abs(X[0]) - 1.0
    g = rlx_jax.jit(f, backend="mlx")
    for got, want in zip(g(x), f(x)):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    counts = g.lower(x).op_counts(level="backend")
    assert counts["Log"] == 2 and counts["Negative"] == 1 and counts["Select"] >= 3, counts
    assert [p[2] for p in _executable(g).plan] == ["select", "select"]
    assert _executable(g).segments is None


@needs_mlx
def test_mlx_if_over_a_loop_runs_only_the_taken_branch():
    """Given: cond(step > 0, count up to 10 by step, identity); with step = 0 the loop branch
    would never end.
    Result: the If is a host branch (the index is read and one branch runs), step = 0 returns at
    once, step = 3 runs the loop; values match JAX."""
    def f(x, step):
        return lax.cond(step > 0,
                        lambda v: lax.while_loop(lambda c: c[0] < 10.0, lambda c: c + step, v),
                        lambda v: v, x)
    x = np.zeros(3, np.float32)
    for compile in (True, False):
        g = rlx_jax.jit(f, backend="mlx", compile=compile)
        for step in (np.float32(0), np.float32(3)):
            np.testing.assert_allclose(g(x, step), f(x, step))
        assert [p[2] for p in _executable(g).plan] == ["host branch", "host loop"]


@needs_mlx
def test_mlx_prepares_region_constants_and_checks_region_dtypes():
    """Given: a scan whose body uses a 64-element constant; and a hand-built If whose branch
    makes a complex128 value.
    Result: the MLX context converted the body's constant at lowering time (it is not rebuilt
    per step); the complex128 value inside the region is refused by LoweringError naming it."""
    from rlx_jax.backends.mlx.lower import MlxContext, lower
    from rlx_jax.ir.graph import Builder, Graph
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    f = lambda xs: lax.scan(lambda c, x: (c @ table + x, None), jnp.zeros(8), xs)[0]  # noqa
    xs = np.ones((3, 8), np.float32)
    graph = rlx_jax.jit(f, backend="mlx").lower(xs).legalized
    body_consts = [n for n in graph.walk() if n.kind is K.Constant and n.out.size == 64]
    assert body_consts and all(id(n) in MlxContext(graph).consts for n in body_consts)
    np.testing.assert_allclose(rlx_jax.jit(f, backend="mlx")(xs), f(xs), rtol=1e-5)

    branch = Builder(Graph("branch"))
    v = branch.input((3,), np.float32)
    c = branch.add(K.Cast, (v,), {"dtype": np.dtype(np.complex128)},
                   out=[((3,), np.complex128)])
    branch.graph.outputs = [branch.add(K.Cast, (c,), {"dtype": np.dtype(np.float32)},
                                       out=[((3,), np.float32)])]
    top = Builder(Graph("top"))
    i, x = top.input((), np.int32), top.input((3,), np.float32)
    top.graph.outputs = [top.add(K.If, (i, x), {}, out=[((3,), np.float32)],
                                 regions=[branch.graph])]
    with pytest.raises(LoweringError, match="complex128"):
        lower(top.graph)


@needs_mlx
@pytest.mark.eager("RLX_JAX_MLX_COMPILE=0: the eager path is under test")
def test_mlx_control_flow_where_mx_compile_is_unavailable(monkeypatch):
    """Given: mx.compile unavailable (RLX_JAX_MLX_COMPILE=0, as on a machine without g++) and a
    program with a While and a host-loop Scan.
    Result: it runs eagerly in one piece (runtime mlx-eager, no segments, region functions
    uncompiled) and matches JAX."""
    from rlx_jax.backends.mlx import rules_control
    monkeypatch.setenv("RLX_JAX_MLX_COMPILE", "0")
    monkeypatch.setattr(rules_control, "UNROLL_MAX", -1)

    def f(w, xs, n):
        return while_dynamic(tanh_rnn(w, xs)[1], n)
    xs = R.randn(7, 3).astype(np.float32)
    g = rlx_jax.jit(f, backend="mlx")
    np.testing.assert_allclose(g(W, xs, np.int32(2)), f(W, xs, np.int32(2)), rtol=1e-5)
    exe = _executable(g)
    assert exe.runtime == "mlx-eager" and exe.segments is None
    assert [p[2] for p in exe.plan] == ["host loop", "host loop"]


def _needs(backend):
    if backend not in BACKENDS:
        pytest.skip(f"{backend} is not available here")


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


@pytest.mark.host("a float64 value inside a scan body: Core ML has no float64, the scan runs on the host")
def test_coreml_region_values_are_checked_like_top_level_ones():
    """Given: a scan whose body computes in float64 (x64 on).
    Result: with fallback="error", an error naming the f64 value, the Cast inside the body and
    its line; by default the scan runs on the host and matches JAX."""
    _needs("coreml")
    from rlx_jax.errors import RlxError
    with jax.enable_x64(True):
        def f(xs):
            body = lambda c, x: (c + jnp.sin(x.astype(jnp.float64)).sum().astype(  # noqa: E731
                jnp.float32), None)
            return lax.scan(body, jnp.float32(0), xs)[0]
        with pytest.raises(RlxError, match=r"f64\[3\] produced by Cast(.|\n)*test_control.py"):
            rlx_jax.jit(f, backend="coreml", fallback="error")(XS[:, 0])
        np.testing.assert_allclose(rlx_jax.jit(f, backend="coreml")(XS[:, 0]),
                                   jax.jit(f)(XS[:, 0]), rtol=1e-6)


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
    Result: the region is rewritten at rank <= 5 like a top-level graph (coreml/passes/rank_control.py), and
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


# ---- more forms: fori_loop with traced bounds, scan inside cond, optax.MultiSteps ----
def fori_traced(x, n):
    """A fori_loop whose bound is traced arrives as a While (a static one as a Scan)."""
    return lax.fori_loop(0, n, lambda i, c: jnp.sin(c) + i.astype(c.dtype), x)


def scan_in_cond(w, xs):
    inner = lambda a: lax.scan(lambda c, x: (jnp.tanh(c + x @ w), c), a[0], a)[0]  # noqa: E731
    return jnp.sum(lax.cond(jnp.sum(xs) > 0, inner, lambda a: a[0] * 2.0, xs))


@configs
def test_fori_loop_with_traced_bounds_is_a_while(backend, options):
    lowered = rlx_jax.jit(fori_traced, backend=backend, **options).lower(X, np.int32(3))
    assert "While" in lowered.op_counts() and "Scan" not in lowered.op_counts()
    for n in (0, 3):
        np.testing.assert_allclose(lowered.compile()(X, np.int32(n)), fori_traced(X, np.int32(n)),
                                   rtol=1e-5, atol=1e-6)


@configs
def test_scan_inside_cond_forward_and_grad(backend, options):
    for xs in (XS[:, 0], -np.abs(XS[:, 0])):
        got = rlx_jax.jit(scan_in_cond, backend=backend, **options)(W, xs)
        np.testing.assert_allclose(got, scan_in_cond(W, xs), rtol=1e-4, atol=1e-5)
        g = rlx_jax.jit(jax.grad(scan_in_cond), backend=backend, **options)(W, xs)
        np.testing.assert_allclose(g, jax.grad(scan_in_cond)(W, xs), rtol=1e-4, atol=1e-5)


@configs
def test_optax_multisteps_accumulates_through_a_cond(backend, options):
    """optax.MultiSteps applies the inner optimizer every k-th step, chosen with lax.cond on
    its step counter: four steps equal jax.jit's."""
    opt = optax.MultiSteps(optax.adam(0.1), every_k_schedule=2)
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)  # noqa: E731

    def step(w, state, x):
        updates, state = opt.update(jax.grad(loss)(w, x), state, w)
        return optax.apply_updates(w, updates), state
    ours, want = rlx_jax.jit(step, backend=backend, **options), jax.jit(step)
    a = b = (W, opt.init(W))
    for x in (X[:3], X[1:], X[:3] * 2, X[1:] - 1):
        a, b = ours(*a, x), want(*b, x)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif("coreml" not in BACKENDS, reason="coremltools is not installed")
def test_coreml_control_flow_targets_are_within_the_backend_floor():
    """Every control kind Core ML claims states the deployment target its MIL ops need, and
    that target is no newer than the oldest one the backend accepts (package.MIN_TARGET)."""
    import coremltools as ct

    from rlx_jax.backends import claims
    from rlx_jax.backends.coreml import package
    from rlx_jax.backends.coreml.mil import control as mil_control
    from rlx_jax.ir.ops import CONTROL
    assert set(mil_control.MIN_TARGET) == CONTROL & claims("coreml").SUPPORTED_OPS == CONTROL
    floor = getattr(ct.target, package.MIN_TARGET)
    assert all(getattr(ct.target, t) <= floor for t in mil_control.MIN_TARGET.values())
