"""Op-table cases: dynamic slices, gather and scatter (modes, general dimension numbers)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .op_table_base import (BF16, BOOL, F16, F32, FLOATS, I32, U32, Case, args, arr, const, f32,
                            over)

GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers
IDX_OOB = [[0, 4, -1, 2, 7]]          # row indices into a 5-row operand; 7 is out of bounds


def _idx(values):
    return const(values, I32)


DYNAMIC_CASES = [
    *over("dynamic_slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
          FLOATS + (I32, BOOL), lambda dt: args(arr(dt, 4, 5), _idx(1), _idx(2)), grad=True),
    # starts are clamped so the slice stays in bounds; negative python-style starts wrap
    Case("dynamic_slice_clamped_f32", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
         args(f32(4, 5), _idx(3), _idx(-9))),
    # the primitive itself clamps a negative start to 0 (only jnp/lax wrappers wrap)
    Case("dynamic_slice_primitive_negative_f32",
         lambda x, i: lax.dynamic_slice_p.bind(x, i, i, slice_sizes=(2, 2)),
         args(f32(4, 5), _idx(-1))),
    Case("dynamic_update_slice_primitive_negative_f32",
         lambda x, u, i: lax.dynamic_update_slice_p.bind(x, u, i, i),
         args(f32(4, 5), f32(2, 2), _idx(-3))),
    Case("dynamic_slice_negative_f32", lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=1),
         args(f32(4, 5), _idx(-2))),
    *over("dynamic_update_slice",
          lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), FLOATS + (I32, BOOL),
          lambda dt: args(arr(dt, 4, 5), arr(dt, 2, 2), _idx(1), _idx(3)), grad=True),
    Case("dynamic_update_slice_clamped_f32",
         lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)),
         args(f32(4, 5), f32(2, 3), _idx(7))),
    Case("at_set_int_index_f32", lambda x: x.at[1].set(3.0), args(f32(3, 4)), grad=True),
]


def _take(mode, **kw):
    return lambda x, i: jnp.take(x, i, axis=0, mode=mode, **kw)


GATHER_CASES = [
    *over("gather_take", _take("clip"), FLOATS + (I32, U32, BOOL),
          lambda dt: args(arr(dt, 5, 3), _idx(IDX_OOB)), grad=True),
    Case("gather_fill_f32", _take("fill", fill_value=-9.0), args(f32(5, 3), _idx(IDX_OOB)),
         grad=True),
    Case("gather_fill_nan_f32", _take("fill"), args(f32(5, 3), _idx(IDX_OOB))),
    Case("gather_fill_i32", _take("fill"), args(arr(I32, 5, 3), _idx(IDX_OOB))),
    Case("gather_promise_in_bounds_f32",
         lambda x, i: x.at[i].get(mode="promise_in_bounds"),
         args(f32(5, 3), _idx([[0, 4, 2], [1, 1, 3]])), grad=True),
    Case("gather_index_negative_f32", lambda x, i: x[i], args(f32(5, 3), _idx([0, -1, -5, 2])),
         grad=True),
    Case("gather_2d_points_f32", lambda x, i: x[i[:, 0], i[:, 1]],
         args(f32(4, 5), _idx([[0, 1], [3, 4], [2, 2]])), grad=True),
    Case("gather_take_along_axis_f32", lambda x, i: jnp.take_along_axis(x, i, axis=1),
         args(f32(3, 5), _idx([[0, 4], [1, 1], [3, 2]])), grad=True),
    # general dimension numbers: windows, batching dims, start_index_map out of order
    Case("gather_general_f32", lambda x, i: lax.gather(
        x, i, GDN(offset_dims=(1,), collapsed_slice_dims=(1,), start_index_map=(1, 0),
                  operand_batching_dims=(2,), start_indices_batching_dims=(0,)),
        slice_sizes=(2, 1, 1), mode="clip"),
        args(f32(4, 5, 3), _idx([[3, 1], [0, 2], [4, 3]])), grad=True),
    Case("gather_window_f32", lambda x, i: lax.gather(
        x, i, GDN(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0, 1)),
        slice_sizes=(2, 3), mode="clip"), args(f32(4, 5), _idx([[0, 0], [3, 4], [1, 2]])),
        grad=True),
]


def _at(op, mode, **kw):
    return lambda x, i, u: getattr(x.at[i], op)(u, mode=mode, **kw)


_DUP = [0, 3, 3, 1, 9]        # duplicated row 3, out-of-bounds row 9


SCATTER_CASES = [
    *over("scatter", _at("set", "drop"), FLOATS + (I32, BOOL),
          lambda dt: args(arr(dt, 5, 3), _idx([0, 3, 1, 9]), arr(dt, 4, 3)),
          grad=True),
    Case("scatter_clip_f32", _at("set", "clip"), args(f32(5, 3), _idx([0, 9]), f32(2, 3))),
    Case("scatter_promise_f32", _at("set", "promise_in_bounds", unique_indices=True),
         args(f32(5, 3), _idx([4, 2]), f32(2, 3)), grad=True),
    *over("scatter-add", _at("add", "drop"), FLOATS + (I32, U32),
          lambda dt: args(arr(dt, 5, 3, lo=0), _idx(_DUP), arr(dt, 5, 3, lo=0)), grad=True),
    Case("scatter-add_clip_f32", _at("add", "clip"), args(f32(5, 3), _idx(_DUP), f32(5, 3))),
    Case("scatter-sub_f32", _at("subtract", "drop"), args(f32(5, 3), _idx(_DUP), f32(5, 3)),
         grad=True),
    *over("scatter-mul", _at("multiply", "drop"), (F32, F16, I32),
          lambda dt: args(arr(dt, 5, 3), _idx(_DUP), arr(dt, 5, 3)), grad=True),
    *over("scatter-min", _at("min", "drop"), (F32, F16, I32, U32),
          lambda dt: args(arr(dt, 5, 3, lo=0), _idx(_DUP), arr(dt, 5, 3, lo=0))),
    *over("scatter-max", _at("max", "drop"), (F32, BF16, I32, U32),
          lambda dt: args(arr(dt, 5, 3, lo=0), _idx(_DUP), arr(dt, 5, 3, lo=0))),
    Case("scatter-add_batched_f32",
         jax.vmap(lambda x, i, u: x.at[i].add(u, mode="drop")),
         args(f32(3, 6), _idx([[0, 5], [2, 2], [7, 1]]), f32(3, 2)), grad=True),
    Case("scatter_general_f32", lambda x, i, u: lax.scatter(
        x, i, u, SDN(update_window_dims=(1,), inserted_window_dims=(1,),
                     scatter_dims_to_operand_dims=(1, 0), operand_batching_dims=(2,),
                     scatter_indices_batching_dims=(0,)), mode="clip"),
        args(f32(4, 5, 3), _idx([[3, 1], [0, 2], [4, 3]]), f32(3, 2))),
]



def _apply(func, dn, update_shape, **kw):
    return lambda x, i: lax.scatter_apply(x, i, func, dn, update_shape=update_shape, **kw)


_AFFINE = lambda v: v * 3 - 1         # noqa: E731 - exact in int32: shows how often it ran
_ROW = SDN(update_window_dims=(1,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,))
# lax.scatter_apply: a `scatter` whose update_jaxpr is func(operand element); an element that k
# update elements hit gets func applied k times (was: replaced by the placeholder zeros)
APPLY_CASES = [
    Case("scatter_apply_f32", _apply(jnp.sin, SDN((), (0,), (0,)), (2,)),
         args(f32(10), _idx([[0], [1]]))),
    # windows of 2 at 0, 9 (out of bounds: dropped), 3 twice (3 gets sin∘sin, 4 too), 12
    Case("scatter_apply_dup_drop_f32", _apply(jnp.sin, _ROW, (5, 2)),
         args(f32(10), _idx([[0], [9], [3], [3], [12]]))),
    # clipped: 9 and 12 start at 8, so 3, 4, 8, 9 get it twice
    Case("scatter_apply_dup_clip_i32", _apply(_AFFINE, _ROW, (5, 2), mode="clip"),
         args(arr(I32, 10), _idx([[0], [9], [3], [3], [12]]))),
    Case("scatter_apply_unique_f32",
         _apply(jnp.exp, SDN((), (0,), (0,)), (3,), unique_indices=True),
         args(f32(6), _idx([[4], [0], [2]]))),
    # lax_test.testScatterApply's batched case: index batching dims (1, 0), window dim 2
    Case("scatter_apply_batched_f32", _apply(jnp.sin, SDN(
        update_window_dims=(2,), inserted_window_dims=(), scatter_dims_to_operand_dims=(2,),
        operand_batching_dims=(0, 1), scatter_indices_batching_dims=(1, 0)), (3, 2, 3)),
        args(f32(2, 3, 10), _idx([[[0], [1]], [[2], [3]], [[4], [5]]]))),
]

# an index vector of length 0 (`x.at[0:n].add(u)` over a whole axis: indices i32[0], one window
# at the origin); Core ML's empty-value fold took it for a scatter of no updates (the operand)
_POLY_A = [3, -5, 1, -1, 3, -5, 1, 4, 3, 0, 0, 3]        # lax_numpy_test.testPolyDiv0's int32
_POLY_B = [-3, -2, -4, 4, 1, 1, -3, -1, -3, 1, -4, 0]
EMPTY_INDEX_CASES = [
    Case("scatter-add_empty_index_f32", lambda x, u: x.at[0:4].add(u),
         args(f32(4, 3), f32(4, 3)), grad=True),
    Case("scatter-max_empty_index_f32", lambda x, u: x.at[:, 0:3].max(u),
         args(f32(2, 3), f32(2, 3))),
    Case("polydiv_i32", jnp.polydiv, args(const(_POLY_A, I32), const(_POLY_B, I32)),
         atol=1e-4, rtol=1e-5),
    Case("polydiv_long_i32", jnp.polydiv, args(const(_POLY_A, I32), const(_POLY_B[:4], I32)),
         atol=1e-4, rtol=1e-5),
]

CASES = DYNAMIC_CASES + GATHER_CASES + SCATTER_CASES + APPLY_CASES + EMPTY_INDEX_CASES
_ = np, F16, U32, BF16, BOOL
