"""Gather and scatter with general dimension numbers on every backend, against `jax.jit` on
CPU: the forms of JAX's own gather/scatter tests (collapsed dims, batching dims, offset dims
anywhere, unsorted start_index_map, slice sizes smaller than the operand, indices of rank 3,
out-of-bounds starts) plus collapsed dims that are not indexed, rank-5 operands with windows,
partial update windows on non-indexed axes, and the cases stablehlo-coreml checks.
(lax.gather always has its index vector last: index_vector_dim is not expressible in JAX.)"""
import warnings

import jax
import numpy as np
import pytest
from jax import lax

import rlx_jax

pytestmark = pytest.mark.extended   # the 'extended tests' CI step (pyproject.toml)

BACKENDS = rlx_jax.available_backends()
GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers


def I(*rows):  # noqa: E743
    return np.array(rows, np.int32)


GATHERS = [  # (name, operand shape, indices, dnums, slice sizes)
    ("collapse0", (5,), I([0], [2]), GDN((), (0,), (0,)), (1,)),
    ("window1", (10,), I([0], [0], [0]), GDN((1,), (), (0,)), (2,)),
    ("row_window", (10, 5), I([0], [2], [1]), GDN((1,), (0,), (0,)), (1, 3)),
    ("two_index", (10, 5), I([0, 2], [1, 0]), GDN((1,), (0,), (0, 1)), (1, 3)),
    ("batching", (2, 5), I([[0], [2]], [[1], [1]]), GDN((), (1,), (1,), (0,), (0,)), (1, 1)),
    ("batching2", (2, 3, 10), I([[0], [1]], [[2], [3]], [[4], [5]]),
     GDN((2,), (), (2,), (0, 1), (1, 0)), (1, 1, 3)),
    ("collapsed_not_indexed", (3, 4, 5), I([1], [3]), GDN((1,), (0, 2), (1,)), (1, 2, 1)),
    ("collapsed_not_indexed2", (3, 4, 5), I([[1], [3]], [[0], [2]]),
     GDN((2,), (0, 2), (1,)), (1, 2, 1)),
    ("offset_first", (4, 6), I([1], [3], [2]), GDN((0,), (0,), (0,)), (1, 4)),
    ("offset_middle", (4, 6, 3), I([[1, 0]], [[2, 2]]), GDN((0, 2), (1,), (1, 2)), (3, 1, 2)),
    ("map_unsorted", (4, 6), I([1, 3], [0, 5], [3, 0]), GDN((), (0, 1), (1, 0)), (1, 1)),
    ("window_kept_size1", (4, 6), I([1], [2]), GDN((1, 2), (), (0,)), (1, 3)),
    ("scalar_batch", (4, 6), I(2), GDN((0,), (0,), (0,)), (1, 6)),
    ("idx_rank3", (5, 4), I([[[1], [2]], [[4], [0]]]), GDN((2,), (0,), (0,)), (1, 4)),
    ("rank5_windows", (2, 3, 2, 2, 2), I([1, 1], [0, 2]),
     GDN((1, 2, 3), (0, 3), (0, 1)), (1, 2, 2, 1, 2)),
    ("rank5_collapse", (2, 3, 2, 2, 2), I([1]), GDN((0, 1, 2, 3), (0,), (0,)), (1, 3, 2, 2, 2)),
    ("out_of_bounds", (5, 3), I([7], [-2], [4]), GDN((1,), (0,), (0,)), (1, 2)),
    ("oob_window", (6,), I([5], [-1], [3]), GDN((1,), (), (0,)), (3,)),
]

SCATTERS = [  # (name, operand shape, indices, updates shape, dnums)
    ("collapse0", (5,), I([0], [2]), (2,), SDN((), (0,), (0,))),
    ("window1", (10,), I([0], [0], [0]), (3, 2), SDN((1,), (), (0,))),
    ("row_window", (10, 5), I([0], [2], [1]), (3, 3), SDN((1,), (0,), (0,))),
    ("batching", (2, 5), I([[0], [2]], [[1], [1]]), (2, 2), SDN((), (1,), (1,), (0,), (0,))),
    ("batching2", (2, 3, 10), I([[0], [1]], [[2], [3]], [[4], [5]]), (3, 2, 3),
     SDN((2,), (), (2,), (0, 1), (1, 0))),
    ("two_index", (10, 5), I([0, 2], [1, 0]), (2, 3), SDN((1,), (0,), (0, 1))),
    ("full_rows", (4, 3), I([1], [3], [1]), (3, 3), SDN((1,), (0,), (0,))),
    ("window_first", (4, 6), I([1], [3]), (4, 2), SDN((0,), (0,), (0,))),
    ("map_unsorted", (4, 6), I([1, 3], [0, 5], [3, 0]), (3,), SDN((), (0, 1), (1, 0))),
    ("window_kept_size1", (4, 6), I([1], [2]), (2, 1, 3), SDN((1, 2), (), (0,))),
    ("rank5_row", (2, 3, 2, 2, 2), I([1]), (1, 3, 2, 2, 2), SDN((1, 2, 3, 4), (0,), (0,))),
    ("rank5_inserted_free", (2, 3, 2, 2, 2), I([1], [0]), (2, 3, 2, 2),
     SDN((1, 2, 3), (0, 4), (0,))),
    ("rank5_windows", (2, 3, 2, 2, 2), I([1, 1], [0, 0]), (2, 2, 2, 2),
     SDN((1, 2, 3), (0, 3), (0, 1))),
    ("partial_rest", (3, 6, 4), I([2], [0]), (2, 2, 3), SDN((1, 2), (1,), (1,))),
    ("out_of_bounds", (5, 3), I([7], [-2], [4]), (3, 3), SDN((1,), (0,), (0,))),
    ("oob_window", (6,), I([5], [-1], [3]), (3, 3), SDN((1,), (), (0,))),
]

# forms of stablehlo-coreml's own gather / scatter cases (operands as arange)
_SI = I([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
        [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]])
GATHERS += [
    ("shc_offsets01_%s" % "_".join(map(str, s)), (10, 8, 5, 20),
     I([1, 1], [3, 1], [1, 10], [4, 15]), GDN((0, 1), (0, 2), (1, 3)), s)
    for s in [(1, 2, 1, 3), (1, 3, 1, 4), (1, 3, 1, 7), (1, 8, 1, 2)]
] + [
    ("shc_offsets12", (10, 8, 5, 20), I([1, 1], [3, 1], [1, 10], [4, 15]),
     GDN((1, 2), (0, 2), (1, 3)), (1, 3, 1, 4)),
    ("shc_offsets02", (10, 8, 5, 20), I([1, 1], [3, 1], [1, 10], [4, 15]),
     GDN((0, 2), (0, 2), (1, 3)), (1, 3, 1, 4)),
    ("shc_no_collapse", (5, 10), I([0, 1], [1, 0], [0, 0], [2, 6], [4, 2]),
     GDN((1, 2), (), (0, 1)), (1, 10)),
    ("shc_offsets0123", (5, 2, 5, 10), I([0, 1, 4], [1, 0, 8], [0, 0, 2], [2, 6, 1], [4, 2, 0]),
     GDN((0, 1, 2, 3), (), (0, 1, 2)), (1, 1, 2, 4)),
    ("shc_idx_rank3", (10, 5), I([[3], [1], [7]], [[4], [0], [9]]), GDN((2,), (0,), (0,)), (1, 5)),
    ("shc_batch_map21", (2, 3, 4, 2), _SI, GDN((3, 4), (1,), (2, 1), (0,), (0,)), (1, 1, 1, 2)),
    ("shc_map10", (3, 4, 2), _SI[0], GDN((2, 3), (0,), (1, 0)), (1, 2, 2)),
    ("shc_batch_idx1", (2, 3, 4, 2), _SI, GDN((3, 4), (1,), (2, 1), (0,), (1,)), (1, 1, 1, 2)),
    ("shc_batch2", (2, 3, 4, 2), np.concatenate((_SI, _SI[::-1, 1:]), 1),
     GDN((3, 4), (), (3, 2), (0, 1), (0, 1)), (1, 1, 1, 1)),
    ("shc_large", (10, 20, 30),
     np.stack([np.arange(100) % 10, np.arange(100) % 20], 1).astype(np.int32),
     GDN((1,), (0, 1), (0, 1)), (1, 1, 30)),
]
SCATTERS += [
    ("shc_spec", (3, 4, 2), I([[0, 2], [1, 0], [2, 1]], [[0, 1], [1, 0], [0, 9]]), (2, 3, 2),
     SDN((2,), (0, 1), (1, 0))),
    ("shc_middle_rank1", (5,), I(1), (2,), SDN((0,), (), (0,))),
    ("shc_replace_vector", (3, 4, 5, 6), I([0, 1, 3], [1, 2, 4]), (2, 6),
     SDN((1,), (0, 1, 2), (0, 1, 2))),
    ("shc_replace_matrix", (3, 4, 5, 6), I([0, 1], [1, 2]), (2, 5, 6), SDN((1, 2), (0, 1), (0, 1))),
    ("shc_3d_indices", (4, 3, 2), I([0, 0, 0], [1, 1, 1], [2, 2, 0], [3, 0, 1]), (4,),
     SDN((), (0, 1, 2), (0, 1, 2))),
]


def check(f, *args, backend):
    want = np.asarray(jax.jit(f)(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(rlx_jax.jit(f, backend=backend)(*args))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def operand(shape, dtype):
    x = np.random.RandomState(0).randn(*shape)
    return (x * 10).astype(dtype) if dtype == "int32" else x.astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["clip", "fill"])
@pytest.mark.parametrize("case", GATHERS, ids=[c[0] for c in GATHERS])
def test_gather_dimension_numbers(case, mode, backend):
    name, shape, idx, dn, sizes = case
    x = operand(shape, "int32" if name.startswith("shc") else "float32")
    check(lambda x, i: lax.gather(x, i, dn, sizes, mode=mode), x, idx, backend=backend)


SCATTER_FNS = {"scatter": lax.scatter, "add": lax.scatter_add, "max": lax.scatter_max}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", SCATTER_FNS)
@pytest.mark.parametrize("case", SCATTERS, ids=[c[0] for c in SCATTERS])
def test_scatter_dimension_numbers(case, fn, backend):
    name, shape, idx, ushape, dn = case
    x, upd = operand(shape, "float32"), operand(ushape, "float32") + 3
    mode = "clip" if fn == "add" else "fill"

    def f(x, i, u):
        return SCATTER_FNS[fn](x, i, u, dn, mode=mode)
    hits = np.asarray(lax.scatter_add(np.zeros(shape, np.float32), idx,
                                      np.ones(ushape, np.float32), dn, mode=mode))
    if fn == "scatter" and hits.max() > 1:
        # JAX (and MIL's scatter_nd) leave open which of several updates of an element wins:
        # only the elements updated at most once are compared
        want = np.asarray(jax.jit(f)(x, idx, upd))
        got = np.asarray(rlx_jax.jit(f, backend=backend)(x, idx, upd))
        np.testing.assert_allclose(got[hits <= 1], want[hits <= 1], rtol=1e-6)
        return
    check(f, x, idx, upd, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_collapsed_dims_need_not_be_indexed(backend):
    """The form stablehlo-coreml's gather cases use: offset dims first, collapsed dims (0, 2)
    indexed through start_index_map (1, 3) of a rank-4 operand."""
    x = np.arange(8000, dtype=np.int32).reshape(10, 8, 5, 20)
    idx = I([1, 1], [3, 1], [1, 10], [4, 15])
    check(lambda x, i: lax.gather(x, i, GDN((0, 1), (0, 2), (1, 3)), (1, 2, 1, 3)), x, idx,
          backend=backend)
