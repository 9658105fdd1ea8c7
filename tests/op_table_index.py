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

CASES = DYNAMIC_CASES + GATHER_CASES + SCATTER_CASES
_ = np, F16, U32, BF16, BOOL
