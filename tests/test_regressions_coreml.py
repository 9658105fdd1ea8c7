"""Regressions found on the coreml backend, checked on every backend, against `jax.jit` of the
same function on CPU: top_k ties and NaN, saturating float -> integer conversion, dynamic
update slices into rank 5, pads with negative edges and interior padding, tiles and repeats
that broadcast through rank 6, programs with zero-size arguments or results, and grouped
convolutions with their kernel gradients (batch-grouped convs), dilations and transposes at
rank 5 and 6, and loop carries whose build-time value holds at the first step only."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from .where_ran import expect_host

pytestmark = pytest.mark.extended   # the 'extended tests' CI step (pyproject.toml)

R = np.random.RandomState(0)
BACKENDS = rlx_jax.available_backends()


def run(f, *args, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rlx_jax.jit(f, backend=backend)(*args)


def check(f, *args, backend, exact=True):
    """rlx_jax.jit(f) on `backend` against jax.jit(f): same tree, shapes, dtypes and values
    (NaN where JAX has NaN)."""
    want = jax.jit(f)(*args)
    got = run(f, *args, backend=backend)
    want_leaves, treedef = jax.tree.flatten(want)
    for w, g in zip(want_leaves, treedef.flatten_up_to(got)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# ---- top_k: ties in index order, NaN above +inf, +0 above -0 ----
TIES = np.array([0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0], np.float32)
TOP_K = {   # name -> (input, k)
    "ties": (TIES, 6),
    "ties_all": (TIES, 11),
    "nan_inf": (np.array([np.nan, np.inf, 0, np.nan], np.float32), 3),
    "nan_ninf": (np.array([-np.inf, np.nan, 0, 1, np.inf, -np.inf], np.float32), 5),
    "signed_zeros": (np.array([-0.0, 0.0, -0.0, 0.0, -1.0], np.float32), 4),
    "rank2_ties": (np.array([[0, 1, 0, 1, 1], [2, 2, 2, 2, 2], [np.nan, 1, np.nan, 5, 1]],
                            np.float32), 3),
    "rank3": (np.round(R.uniform(0, 3, (2, 3, 6))).astype(np.float32), 4),
    "f16_ties": (TIES.astype(np.float16), 6),
    "f16_nan": (np.array([1, np.nan, np.inf, 1, np.nan], np.float16), 4),
    "i32_ties": (TIES.astype(np.int32), 6),
    "i32_rank2": (np.array([[3, 1, 3, 1], [0, 0, 0, 0]], np.int32), 2),
    "bool_ties": (np.array([[True, False, True, True], [False, False, True, False]]), 3),
    "k0": (TIES, 0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", TOP_K)
def test_top_k_ties_and_nan(name, backend):
    x, k = TOP_K[name]
    check(lambda x: lax.top_k(x, k), x, backend=backend)


# ---- float -> integer conversion: NaN -> 0, truncation, saturation (XLA) ----
SPECIALS = np.array([np.nan, np.inf, -np.inf, 1.5, -1.5, -0.7, 3e9, -3e9, 2147483520.0,
                     2147483648.0, 300.0, -200.0, 255.9, 70000.0], np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dst", ["int32", "int16", "int8", "uint8", "bool"])
@pytest.mark.parametrize("src", ["float32", "float16"])
def test_float_to_int_saturates(src, dst, backend):
    with np.errstate(over="ignore"):
        x = SPECIALS.astype(src)
    check(lambda x: x.astype(dst), x, backend=backend)


def test_float_to_int32_reproducer():
    x = np.array([np.nan, np.inf, -np.inf, 1.5], np.float32)
    got = run(lambda x: x.astype(jnp.int32), x, backend="coreml")
    np.testing.assert_array_equal(got, [0, 2147483647, -2147483648, 1])


# ---- dynamic update slices into rank 5 (the gradient of x[i] on a rank-5 x) ----
@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_of_index_into_rank5(backend):
    x = R.randn(2, 3, 2, 2, 2).astype(np.float32)
    check(jax.grad(lambda x: jnp.sum(x[np.array(1)])), x, backend=backend)


DUS = {   # name -> (operand shape, update shape, starts)
    "rank5_row": ((2, 3, 2, 2, 2), (1, 3, 2, 2, 2), (1, 0, 0, 0, 0)),
    "rank5_block": ((2, 3, 2, 2, 2), (1, 2, 1, 2, 1), (1, 2, 1, 0, 1)),
    "clamped": ((3, 4), (2, 2), (-1, 9)),
    "whole": ((2, 3), (2, 3), (0, 0)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("name", DUS)
def test_dynamic_update_slice(name, dtype, backend):
    shape, ushape, starts = DUS[name]
    x = (np.arange(np.prod(shape)).reshape(shape) % 3).astype(dtype)
    upd = (np.arange(np.prod(ushape)).reshape(ushape) % 2 + 7).astype(dtype)
    check(lambda x, u, *i: lax.dynamic_update_slice(x, u, i), x, upd,
          *[np.int32(s) for s in starts], backend=backend)


# ---- lax.pad: negative edges with interior padding ----
X5 = np.arange(1, 6, dtype=np.float32)
X34 = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
PADS = [(np.array([5.0], np.float32), [(-2, 2, 2)]),
        (np.array([5.0], np.float32), [(-1, 1, 0)]),
        (X34, [(-1, 2, 1), (2, -3, 2)]),
        (X34, [(1, -1, 0), (-2, 1, 1)]),
        (X34, [(0, 0, 3), (-1, -1, 0)]),
        (X34.astype(np.int32), [(-1, 2, 1), (2, -3, 2)]),
        (X34 > 5, [(-2, 1, 1), (1, 0, 0)])]
PADS += [(X5, [(lo, hi, k)]) for lo in (-3, -1, 0, 2) for hi in (-3, -1, 0, 2) for k in (0, 2)
         if lo + hi + 5 + 4 * k > 0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("i", range(len(PADS)))
def test_pad_negative_and_interior(i, backend):
    x, config = PADS[i]
    check(lambda x: lax.pad(x, np.array(0, x.dtype), config), x, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_reproducer(backend):
    got = run(lambda x: lax.pad(x, 0.0, [(-2, 2, 2)]), np.array([5.0], np.float32),
              backend=backend)
    np.testing.assert_array_equal(got, [0.0])


# ---- tiles and repeats that broadcast through rank 6 (and their gradients) ----
TILES = [((2, 3, 4), (2, 1, 3)), ((3, 2), (2, 1, 2)), ((2, 3, 4), (2, 2, 3, 2)),
         ((1, 3, 1), (3, 2, 2)), ((2, 2, 2, 2), (2, 1, 2, 1)), ((2, 1, 3), (1, 4, 1))]
REPEATS = [((2, 3, 4, 2, 2), 2, 1), ((2, 3, 4, 2, 2), 3, 4), ((2, 3, 2, 2, 2), 2, 0)]


def _weighted_sum(f):
    return jax.grad(lambda x: jnp.sum(f(x) * jnp.cos(jnp.arange(f(x).size).reshape(
        f(x).shape))))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,reps", TILES)
def test_tile_through_rank6(shape, reps, backend):
    x = R.randn(*shape).astype(np.float32)
    check(lambda x: jnp.tile(x, reps), x, backend=backend)
    check(_weighted_sum(lambda x: jnp.tile(x, reps)), x, backend=backend, exact=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,k,axis", REPEATS)
def test_repeat_rank5(shape, k, axis, backend):
    x = R.randn(*shape).astype(np.float32)
    check(lambda x: jnp.repeat(x, k, axis=axis), x, backend=backend)
    check(_weighted_sum(lambda x: jnp.repeat(x, k, axis=axis)), x, backend=backend,
          exact=False)


def test_tile_reproducer_stays_at_rank5():
    f = lambda x: jnp.tile(x, (2, 1, 3))   # noqa: E731
    x = np.ones((2, 3, 4), np.float32)
    assert run(f, x, backend="coreml").shape == (4, 3, 12)
    lowered = rlx_jax.jit(f, backend="coreml").lower(x)
    assert "tile" in lowered.op_counts(level="backend")


# ---- zero-size arguments and results (Core ML has no empty tensors) ----
E03 = np.zeros((0, 3), np.float32)
Y23 = np.arange(6, dtype=np.float32).reshape(2, 3)
EMPTY = {   # name -> (function, arguments)
    "empty_in_nonempty_out": (lambda x, y: y * 2 + jnp.sum(x), (E03, Y23)),
    "all_outputs_empty": (lambda x: (x * 2, x + 1), (E03,)),
    "mixed_outputs": (lambda x, y: (jnp.sum(x), jnp.concatenate([x, y]), x * 2, y + 1),
                      (E03, Y23)),
    "sum_over_empty": (lambda x: jnp.sum(x), (E03,)),
    "sum_empty_axis": (lambda x: jnp.sum(x, axis=0), (E03,)),
    "max_empty_axis": (lambda x: jnp.max(x, axis=0, initial=-jnp.inf), (E03,)),
    "min_empty_axis_i32": (lambda x: jnp.min(x, axis=0, initial=7), (E03.astype(np.int32),)),
    "prod_empty_axis": (lambda x: jnp.prod(x, axis=0), (E03,)),
    "any_empty_axis": (lambda x: jnp.any(x > 0, axis=0), (E03,)),
    "and_empty_axis_i32": (lambda x: lax.reduce_and(x, (0,)), (E03.astype(np.int32),)),
    "and_empty_inside_u8": (lambda y: lax.reduce_and(y[:0], (0,)), (Y23.astype(np.uint8),)),
    "concat_empty_operand": (lambda x, y: jnp.concatenate([x, y]), (E03, Y23)),
    "concat_empty_between": (lambda x, y: jnp.concatenate([y, x, y]) * 2, (E03, Y23)),
    "empty_result_of_nonempty_input": (lambda y: (y[:0], y * 2), (Y23,)),
    "empty_inside": (lambda y: jnp.sum(y[:, :0]) + jnp.concatenate([y[:0], y]), (Y23,)),
    "matmul_empty_contraction": (lambda x, w: x.T @ w, (E03, np.zeros((0, 4), np.float32))),
    "pad_of_empty": (lambda x: lax.pad(x, 1.5, [(1, 1, 0), (0, 0, 0)]), (E03,)),
    "pad_of_empty_run_time_value": (lambda x, v: lax.pad(x, v, [(1, 1, 0), (0, 0, 0)]),
                                    (E03, np.float32(2.5))),
    "scatter_no_updates": (lambda y, i, u: y.at[i].add(u),
                           (Y23, np.zeros((0,), np.int32), np.zeros((0, 3), np.float32))),
    "only_empty_inputs": (lambda x: jnp.ones(3) + jnp.sum(x), (E03,)),
    "grad_through_concat": (jax.grad(lambda x, y: jnp.sum(jnp.concatenate([x, y]) ** 2),
                                     argnums=(0, 1)), (E03, Y23)),
}


EMPTY_ON_HOST = {"and_empty_inside_u8": "MIL has no bitwise reduction of uint8: on the host"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", EMPTY)
def test_zero_size_arguments_and_results(name, backend):
    f, args = EMPTY[name]
    if backend == "coreml" and name in EMPTY_ON_HOST:
        expect_host(EMPTY_ON_HOST[name])
    check(f, *args, backend=backend)


def test_all_empty_results_build_no_model():
    lowered = rlx_jax.jit(lambda x: (x * 2, x[:, :1]), backend="coreml").lower(E03)
    assert lowered.op_counts(level="backend") == {}
    assert "no Core ML model" in lowered.as_text(level="backend")
    compiled = lowered.compile()
    assert compiled.runtime == "static"
    out = compiled(E03)
    assert [o.shape for o in out] == [(0, 3), (0, 1)]


def test_empty_inputs_are_no_model_inputs():
    f = lambda x, y: (jnp.concatenate([x, y]), jnp.sum(x))   # noqa: E731
    lowered = rlx_jax.jit(f, backend="coreml").lower(E03, Y23)
    prog = lowered.backend.build_program(lowered.legalized)
    assert prog.input_names == ["y"] and prog.output_names == ["output_0"]
    assert prog.op_counts() == {"identity": 1}      # the output is the input y as it is


def test_export_refuses_empty_signature(tmp_path):
    with pytest.raises(rlx_jax.errors.LoweringError, match="cannot be empty.*x: f32\\[0,3\\]"):
        rlx_jax.export_coreml(lambda x, y: jnp.concatenate([x, y]), E03, Y23,
                              path=str(tmp_path / "in.mlpackage"))
    with pytest.raises(rlx_jax.errors.LoweringError, match="cannot be empty.*output"):
        rlx_jax.export_coreml(lambda y: (y[:0], y * 2), Y23, path=str(tmp_path / "out.mlpackage"))


def test_export_folds_empty_values_inside(tmp_path):
    from rlx_jax.backends.coreml.executor.reference import MilReferenceExecutor
    f = lambda y: (jnp.sum(y[:, :0]) + jnp.concatenate([y[:0], y]), jnp.sum(y[:0]))  # noqa
    path = rlx_jax.export_coreml(f, Y23, path=str(tmp_path / "inside.mlpackage"))
    exe = MilReferenceExecutor(path)
    outs = exe({exe.input_names[0]: Y23})
    want = jax.jit(f)(Y23)
    np.testing.assert_array_equal(outs[exe.output_names[0]], want[0])
    np.testing.assert_array_equal(np.asarray(outs[exe.output_names[1]]).reshape(()), want[1])


# ---- grouped convolutions: kernel gradients, batch groups, dilations and transposes at rank 5
def _gconv(strides, padding, **kw):
    return lambda x, k: lax.conv_general_dilated(x, k, strides, padding, **kw)


GROUPED = {   # name -> (x shape, kernel shape, conv)
    "feature_groups_2d": ((2, 4, 5, 6), (6, 2, 2, 3),
                          _gconv((1, 2), ((1, 0), (0, 1)), feature_group_count=2)),
    "batch_groups_1d": ((4, 3, 7), (6, 3, 2), _gconv((2,), "SAME", batch_group_count=2)),
    "batch_groups_3d_nhwc": ((4, 3, 4, 3, 2), (2, 2, 2, 2, 6),
                             _gconv((1, 1, 1), "VALID", batch_group_count=2,
                                    dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
    "rhs_dilated_3d": ((1, 2, 5, 4, 5), (2, 2, 2, 1, 2),
                       _gconv((1, 1, 1), "VALID", rhs_dilation=(2, 1, 2))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", GROUPED)
def test_grouped_conv_and_its_kernel_gradient(name, backend):
    """JAX's kernel gradient of a feature-grouped conv is a batch-grouped conv."""
    xs, ks, f = GROUPED[name]
    x, k = R.uniform(-1, 1, xs).astype(np.float32), R.uniform(-1, 1, ks).astype(np.float32)
    check(f, x, k, backend=backend, exact=False)
    check(jax.grad(lambda x, k: jnp.sum(jnp.sin(f(x, k))), argnums=(0, 1)), x, k,
          backend=backend, exact=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_base_dilated_pool_of_rank5(backend):
    x = R.uniform(-1, 1, (1, 2, 3, 2, 3)).astype(np.float32)
    check(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 1, 2), (1,) * 5,
                                      "VALID", base_dilation=(1, 1, 2, 1, 2)), x,
          backend=backend)


def _regroup(x):   # [6, 2, 2, 3, 2] -> [3, 4, 2, 3, 2] through rank 6, as JAX regroups kernels
    return x.reshape(2, 3, 2, 2, 3, 2).transpose(1, 0, 2, 3, 4, 5).reshape(3, 4, 2, 3, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transpose_through_rank6(backend):
    check(_regroup, R.uniform(-1, 1, (6, 2, 2, 3, 2)).astype(np.float32), backend=backend)


def test_transpose_through_rank6_is_lowered_at_rank3():
    """Given Reshape (rank 6) -> Transpose (rank 6) -> Reshape, the Core ML graph holds one
    Reshape -> Transpose -> Reshape, the transpose at rank 3 ([2, 3, 24] by (1, 0, 2))."""
    from rlx_jax.backends.coreml.passes.rank import lower_rank
    x = np.ones((6, 2, 2, 3, 2), np.float32)
    graph = lower_rank(rlx_jax.jit(_regroup, backend="coreml").lower(x).legalized)
    body = [n for n in graph.nodes if n.kind.name != "Input"]
    assert [n.kind.name for n in body] == ["Reshape", "Transpose", "Reshape"]
    assert max(v.ndim for n in body for v in n.outputs) == 5
    assert body[1].attrs["perm"] == (1, 0, 2) and body[1].out.shape == (3, 2, 24)


def _log_gelu(x):
    return jnp.log(jax.nn.gelu(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_of_a_saturated_gelu_is_minus_inf(backend):
    """Fuzz seed 100008: jax.nn.gelu (tanh form, recognised as Activation[gelu_tanh]) of
    -5.566 is -0.0 in JAX, whose tanh saturates at -1 in float32; MIL's gelu op gave a tiny
    negative value there, and its log NaN instead of -inf. Core ML now lowers jax.nn.gelu's
    own formula."""
    x = np.array([-5.566, -12.0, -3.0, 0.5, 2.0], np.float32)
    check(_log_gelu, x, backend=backend, exact=False)
    assert np.isneginf(np.asarray(run(_log_gelu, x, backend=backend))[:2]).all()


# ---- loop carries whose build-time value holds at the first step only ----
def _bessel_jn(z):      # JAX's lax_scipy_test.testBesselJnRandomPositiveZ (order 3, 15 steps)
    return jax.scipy.special.bessel_jn(z, v=3, n_iter=15)


def _scan_kept_by_a_cond(x):    # bessel_jn's form: a cond on the step's parity keeps s = 0
    def step(c, t):
        acc, s = c
        s = lax.cond(t % 2 == 0, lambda: s, lambda: s + 2 * acc)
        return (acc * 0.5 + x, s), s
    return lax.scan(step, (jnp.zeros(3), jnp.zeros(3)), jnp.arange(5.0), reverse=True)


def _scan_times_a_slice(x):     # s * xs[0] = 0 = s at the first step only
    return lax.scan(lambda c, t: ((c[0] + x * t, c[1] * t), c[1]),
                    (jnp.zeros(3), jnp.zeros(3)), jnp.arange(4.0))


def _while_times_a_slice(x):
    xs = jnp.arange(4.0)
    return lax.while_loop(lambda c: c[0] < 4,
                          lambda c: (c[0] + 1, c[1] + x * xs[c[0]], c[2] * xs[c[0]]),
                          (0, jnp.zeros(3), jnp.zeros(3)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f", [_bessel_jn, _scan_kept_by_a_cond, _scan_times_a_slice,
                               _while_times_a_slice], ids=lambda f: f.__name__.strip("_"))
def test_loop_carry_constant_at_the_first_step_only(f, backend):
    """A carry whose value is known and unchanged at the first step (a constant init, with the
    step counter and the x slice known there) but not later: coremltools' while_loop builder
    rebuilt its blocks once and raised ValueError ("Block output ...: None is not equal to
    block input ... after value changes"); Core ML's loop vars now carry no build-time value
    (mil_control._loop_variant). Tolerance rtol = atol = 1e-5 (float32, bessel_jn's divisions
    and recurrences round differently per backend)."""
    check(f, np.array([0.3, 1.1, 2.7], np.float32), backend=backend, exact=False)
