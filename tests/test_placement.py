"""Host-fallback partitioning: segments, the placement report, fallback="error", export, auto.

Oracles: JAX on CPU for values; exact segment/boundary lists for structure."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax import errors
from rlx_jax.backends import supports
from rlx_jax.backends.base import all_backends
from rlx_jax.frontend.trace import trace
from rlx_jax.ir.ops import OpKind as K

from .conftest import BACKENDS

pytestmark = pytest.mark.host("host segments are what these tests are about")

R = np.random.RandomState(0)
X = R.randn(4, 8).astype(np.float32)
W = R.randn(8, 8).astype(np.float32)


def _needs(name):
    if name not in BACKENDS:
        pytest.skip(f"backend {name} is not available here")


def bitwise_middle(x, w):
    h = jnp.tanh(x @ w)
    b = (h * 100).astype(jnp.int32) & 7           # Core ML: no bitwise and
    return b.astype(jnp.float32) @ w


def _close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def test_one_bitwise_op_in_the_middle_is_three_segments_with_the_minimal_cut():
    _needs("coreml")
    f = rlx_jax.jit(bitwise_middle, backend="coreml")
    placed = f.lower(X, W).placement()
    assert [s.placement for s in placed.segments] == ["device", "host", "device"]
    host = placed.segments[1]
    assert [n.kind for n in host.nodes] == [K.Binary] and host.nodes[0].attrs["fn"] == "and"
    assert [v.type_str() for v in host.reads] == ["i32[4,8]"]         # the value into `and`
    assert [v.type_str() for v in host.writes] == ["i32[4,8]"]        # and its result only
    last = placed.segments[2]
    assert sorted(v.type_str() for v in last.reads) == ["f32[8,8]", "i32[4,8]"]
    assert last.reads[[v.type_str() for v in last.reads].index("f32[8,8]")].node.kind is K.Input
    assert placed.crossing_bytes() == 2 * 4 * 8 * 4
    _close(f(X, W), jax.jit(bitwise_middle)(X, W))
    text = str(placed)
    assert "segment 1: host (xla), 1 op(s)" in text and "no bitwise and" in text
    assert "test_placement.py" in text                                # source lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_program_needing_no_host_is_one_device_segment(backend):
    f = rlx_jax.jit(lambda x, w: jnp.tanh(x @ w).sum(0), backend=backend)
    placed = f.lower(X, W).placement()
    assert [s.placement for s in placed.segments] == ["device"] and not placed.host
    assert placed.device_only and placed.crossing_bytes() == 0


def two_host_ops(x):
    a = lax.population_count(x.astype(jnp.int32))
    return (a.astype(jnp.float32) * 2).astype(jnp.int32) | 1


def test_fallback_error_names_every_host_op_and_line():
    _needs("coreml")
    with pytest.raises(errors.LegalizationError) as e:
        rlx_jax.jit(two_host_ops, backend="coreml", fallback="error")(X)
    msg = str(e.value)
    assert "cannot run 2 node(s)" in msg, msg
    assert "Activation" in msg and "population_count" in msg and "Binary" in msg
    assert msg.count("test_placement.py:") == 2
    got = rlx_jax.jit(two_host_ops, backend="coreml")(X)          # fallback="host": runs
    np.testing.assert_array_equal(np.asarray(got), np.asarray(two_host_ops(X)))


def test_export_refuses_a_program_with_host_ops_naming_them(tmp_path):
    _needs("coreml")
    with pytest.raises(errors.LegalizationError) as e:
        rlx_jax.export_coreml(bitwise_middle, X, W, path=str(tmp_path / "m.mlpackage"))
    msg = str(e.value)
    assert "cannot export 1 node(s)" in msg and "no bitwise and" in msg
    assert "test_placement.py:" in msg and "rlx_jax.jit(..., backend='coreml')" in msg
    assert not (tmp_path / "m.mlpackage").exists()


def test_supports_reports_what_would_run_on_the_host():
    _needs("coreml")
    graph = trace(bitwise_middle, X, W)
    report = supports("coreml", graph)
    assert not report and [n.kind for n, _ in report.host] == [K.Binary]
    assert "no bitwise and" in report.host[0][1]
    assert supports("xla", graph)


def test_a_device_op_read_only_after_the_host_segment_is_computed_there():
    """Given: y * 3 on an argument, read only after the host op. Result: it is computed in the
    last device segment, so only the argument (not its result) enters that segment."""
    _needs("coreml")

    def f(x, y):
        z = y * 3
        b = x.astype(jnp.int32) & 7
        return b.astype(jnp.float32) + z
    placed = rlx_jax.jit(f, backend="coreml").lower(X, X).placement()
    assert [s.placement for s in placed.segments] == ["device", "host", "device"]
    reads = placed.segments[2].reads              # the `and` result and the argument y
    assert sorted((v.node.kind.name, v.node.attrs.get("fn")) for v in reads) == \
        [("Binary", "and"), ("Input", None)], reads
    assert [n.attrs["fn"] for n in placed.segments[2].nodes if n.kind is K.Binary] == \
        ["mul", "add"]                            # z = y * 3 is computed there
    assert placed.crossing_bytes() == 2 * X.size * 4
    _close(rlx_jax.jit(f, backend="coreml")(X, X), f(X, X))


def test_a_value_read_by_two_device_segments_is_converted_once():
    _needs("coreml")

    def f(x):
        a = x.astype(jnp.int32) & 7                   # host
        d = a.astype(jnp.float32) * 2                 # device
        e = d.astype(jnp.int32) | 1                   # host
        return (e + a).astype(jnp.float32) * 3       # device, reads `a` again
    jitted = rlx_jax.jit(f, backend="coreml")
    compiled = jitted.lower(X * 10).compile()
    placed = compiled.lowered.placement()
    assert [s.placement for s in placed.segments] == ["device", "host", "device", "host",
                                                      "device"]
    np.testing.assert_array_equal(np.asarray(compiled(X * 10)), np.asarray(f(X * 10)))
    made_in = {v.id: s.placement for s in placed.segments for v in s.writes}
    crossing = [(v.id, s.placement) for s in placed.segments for v in s.reads
                if v.node.kind is not K.Input and made_in[v.id] != s.placement]
    assert len(set(crossing)) < len(crossing)          # one host value read by two segments
    assert compiled.executable.last_crossings["conversions"] == len(set(crossing))


def test_a_control_flow_node_is_placed_whole():
    _needs("coreml")

    def f(xs):
        def body(c, x):
            return c + (x.astype(jnp.int32) & 3).astype(jnp.float32).sum(), None
        return lax.scan(body, jnp.float32(0), xs)[0] * 2
    xs = X * 10
    placed = rlx_jax.jit(f, backend="coreml").lower(xs).placement()
    (host, why), = placed.host_ops()
    assert host.kind is K.Scan and "no bitwise and" in why, why
    _close(rlx_jax.jit(f, backend="coreml")(xs), jax.jit(f)(xs))


def test_host_segments_log_one_warning(caplog):
    _needs("coreml")

    def g(x):
        return (x.astype(jnp.int32) ^ 5).astype(jnp.float32) * 2
    with caplog.at_level(logging.WARNING):
        f = rlx_jax.jit(g, backend="coreml")
        f(X), f(X), rlx_jax.jit(g, backend="coreml")(X)
    ours = [r for r in caplog.records if "on the host" in r.getMessage()]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert "Binary at test_placement.py" in ours[0].getMessage()


def test_as_text_placement_tags_every_node():
    _needs("coreml")
    text = rlx_jax.jit(bitwise_middle, backend="coreml").lower(X, W).as_text("placement")
    assert "[   host1] " in text and "Binary[fn=and]" in text and "[ device2]" in text


def test_auto_prefers_the_backend_placing_most_work_on_the_device(monkeypatch):
    _needs("coreml")
    _needs("mlx")
    from rlx_jax.backends import base
    monkeypatch.setattr(base, "AUTO_ORDER", ("coreml", "mlx", "xla"))
    assert rlx_jax.jit(bitwise_middle).lower(X, W).backend.name == "mlx"
    assert rlx_jax.jit(lambda x: x * 2).lower(X).backend.name == "coreml"


def sort_middle(x, w):
    h = jnp.tanh(x @ w)
    return jnp.sort(h, axis=1) @ w + h


def test_mlx_runs_a_kind_it_does_not_claim_on_the_host_between_compiled_segments(monkeypatch):
    """Given: MLX made not to claim Sort. Result: device, host (the sort), device; each device
    segment is its own compiled MLX function; values equal JAX's."""
    _needs("mlx")
    mlx = all_backends()["mlx"]
    monkeypatch.setattr(mlx, "SUPPORTED_OPS", mlx.SUPPORTED_OPS - {K.Sort})
    compiled = rlx_jax.jit(sort_middle, backend="mlx").lower(X, W).compile()
    placed = compiled.lowered.placement()
    assert [s.placement for s in placed.segments] == ["device", "host", "device"]
    assert "no lowering for Sort" in placed.host_ops()[0][1]
    runtimes = [getattr(exe, "runtime", "?") for _, exe, _ in compiled.executable.steps]
    assert runtimes[0] == runtimes[2] == "mlx-compiled", runtimes
    _close(compiled(X, W), jax.jit(sort_middle)(X, W))
    grads = rlx_jax.jit(jax.grad(lambda x, w: sort_middle(x, w).sum()), backend="mlx")(X, W)
    _close(grads, jax.grad(lambda x, w: sort_middle(x, w).sum())(X, W), 1e-4)


def test_bad_fallback_value_is_refused():
    with pytest.raises(errors.BadArgumentError, match="fallback"):
        rlx_jax.jit(jnp.sin, backend="xla", fallback="cpu")


def test_a_device_segment_knows_the_bounds_the_whole_program_proves():
    """Given: a uint32 iota (bounds [0, 35]) read after a host op by `k * 1000`, not folded
    into a constant. Result: the last Core ML segment takes k with those bounds (so k * 1000 is
    proven to fit int32 there too) and the values equal JAX's."""
    _needs("coreml")

    def f(x):
        k = jnp.arange(8, dtype=jnp.uint32) * 5
        b = (x.astype(jnp.int32) & 7) > 3                      # host
        return jnp.where(b, k * 1000, k)
    x = np.arange(8, dtype=np.float32) * 3
    jitted = rlx_jax.jit(f, backend="coreml", fold_constants=False)
    placed = jitted.lower(x).placement()
    assert [s.placement for s in placed.segments] == ["device", "host", "device"]
    (k,) = [v for v in placed.segments[2].graph.inputs if v.dtype == np.uint32]
    assert k.node.attrs["bounds"] == (0, 35)
    np.testing.assert_array_equal(np.asarray(jitted(x)), np.asarray(f(x)))


def test_compiled_runtime_says_host():
    _needs("coreml")
    compiled = rlx_jax.jit(bitwise_middle, backend="coreml").lower(X, W).compile()
    assert compiled.runtime.endswith("+host") and compiled.runtime != "none+host"
    with pytest.raises(errors.BadArgumentError, match="placement"):
        compiled.lowered.op_counts("backend")


@jax.custom_vjp
def _int_passthrough(x, n):
    return x


_int_passthrough.defvjp(lambda x, n: (x, None), lambda _, g: (g * 3.0, 1))


def float0_result(x):
    """float0 cotangents, which no device array holds: an integer argument's, a float0
    constant (JAX's test_float0_cotangents_automatically_handled), and a bool mask's of shape
    (3,) (testDotProductAttentionBiasGradient's mask)."""
    mask = jnp.array([True, False, True])
    masked = jax.vjp(lambda v, m: jnp.where(m, v, 0.0), jnp.full((3,), x), mask)[1]
    return x * 2.0, jax.vjp(_int_passthrough, x, 1)[1](x), masked(jnp.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float0_constant_result_is_handed_back_by_the_host(backend):
    """The constant is in no segment; the device runs the rest and the host gives the float0
    array back as jax.jit does (dtype, shape and the device part's values)."""
    x = np.float32(1.5)
    f = rlx_jax.jit(float0_result, backend=backend)
    got, want = f(x), jax.jit(float0_result)(x)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        if np.asarray(w).dtype != jax.dtypes.float0:
            _close(g, w)
    placed = f.lower(x).placement()
    assert not placed.device_only == (backend != "xla")
    assert (K.Constant in [n.kind for n, _ in placed.host_ops()]) == (backend != "xla")


def _dot_statements(text):
    """(node ids with their attribute text, edges (src, dst, attribute text), cluster labels)
    of the DOT text to_dot writes: one statement a line, braces balanced."""
    import re
    assert text.startswith("digraph ") and text.count("{") == text.count("}")
    nodes, edges, clusters = {}, [], []
    for line in text.splitlines():
        line = line.strip()
        if m := re.fullmatch(r"(\w+) -> (\w+)(?: \[(.*)\])?;", line):
            edges.append(m.groups())
        elif m := re.fullmatch(r"(\w+) \[(.*)\];", line):
            if m.group(1) not in ("node", "edge"):
                assert m.group(1) not in nodes, f"{m.group(1)} declared twice"
                nodes[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r'label="([^"]*)"; style=filled; color="[^"]*";', line):
            clusters.append(m.group(1))
    return nodes, edges, clusters


def test_placement_as_dot_names_every_segment_and_crossing():
    """Given:  the bitwise op between two device segments on Core ML
       Result: DOT with one cluster per segment (its placement and backend), every edge
               between declared nodes, the host op's reason, and one bold labelled edge per
               value crossing into another segment"""
    _needs("coreml")
    placed = rlx_jax.jit(bitwise_middle, backend="coreml").lower(X, W).placement()
    nodes, edges, clusters = _dot_statements(placed.to_dot())
    where = {"device": "device (coreml)", "host": "host (xla)"}
    assert clusters == [f"segment {s.index}: {where[s.placement]}, {len(s.nodes)} op(s)"
                        for s in placed.segments]
    assert all(a in nodes and b in nodes for a, b, _ in edges)
    host_labels = [label for label in nodes.values() if "Core ML cannot express" in label]
    assert len(host_labels) == len(placed.host) >= 1
    crossing = {attrs.split('label="')[1].split(" ")[0] for _, _, attrs in edges
                if attrs and "style=bold" in attrs}
    assert crossing == {v.type_str() for s in placed.segments for v in s.reads
                        if v.node.kind is not K.Input}


def test_placement_as_segments_dot():
    """Given:  the bitwise op between two device segments on Core ML
       Result: one box per segment titled as the op-level clusters, the host box with its
               reason, and one bold edge per pair of segments values cross between"""
    import re
    _needs("coreml")
    placed = rlx_jax.jit(bitwise_middle, backend="coreml").lower(X, W).placement()
    dot = placed.to_dot(detail="segments")
    labels = re.findall(r'^  s(\d+) \[.*label="(.*)"\];$', dot, flags=re.M)
    where = {"device": "device (coreml)", "host": "host (xla)"}
    assert [(int(i), label.split("\\n")[0]) for i, label in labels] == [
        (s.index, f"segment {s.index}: {where[s.placement]}, {len(s.nodes)} op(s)")
        for s in placed.segments]
    host = [label for _, label in labels if "host (xla)" in label]
    assert len(host) == 1 and "MIL has no bitwise and" in host[0]
    bold = re.findall(r"^  s(\d+) -> s(\d+) \[style=bold", dot, flags=re.M)
    seg = {id(n): s.index for s in placed.segments for n in s.nodes}
    assert sorted(bold) == sorted({(str(seg[id(v.node)]), str(s.index))
                                   for s in placed.segments for v in s.reads
                                   if id(v.node) in seg and v.node.kind is not K.Constant
                                   and seg[id(v.node)] != s.index})
    with pytest.raises(ValueError, match="'ops' or 'segments'"):
        placed.to_dot(detail="boxes")
