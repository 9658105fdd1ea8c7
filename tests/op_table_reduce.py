"""Op-table cases: contractions, reductions, arg-reductions, cumulative ops, sorting, top_k."""
import jax.numpy as jnp
import numpy as np
from jax import lax

from .op_table_base import (BF16, BOOL, F16, F32, FLOATS, I32, INTS, U32, Case, args, arr,
                            const, f32, over, ties)

NAN, INF = float("nan"), float("inf")


def _dot(name, dn, lshape, rshape, dtypes=FLOATS, pet=None, grad=True, scale=1.0):
    return over(name, lambda x, y: lax.dot_general(x, y, dn, preferred_element_type=pet), dtypes,
                lambda dt: args(arr(dt, *lshape, lo=-1, hi=1), arr(dt, *rshape, lo=-1, hi=1)),
                grad=grad, scale=scale)


DOT_CASES = [
    *over("matmul", jnp.matmul, FLOATS + (I32,),
          lambda dt: args(arr(dt, 5, 3, lo=-2, hi=2), arr(dt, 3, 4, lo=-2, hi=2)), grad=True),
    *_dot("dot_vec", (((0,), (0,)), ((), ())), (6,), (6,), dtypes=(F32,)),
    *_dot("dot_outer", (((), ()), ((), ())), (3,), (4,), dtypes=(F32,)),
    *_dot("dot_batch", (((2,), (1,)), ((0,), (0,))), (2, 3, 4), (2, 4, 5)),
    # contracting and batch dimensions that are neither leading nor trailing
    *_dot("dot_general_dims", (((0, 3), (2, 0)), ((1,), (1,))), (4, 2, 3, 5), (5, 2, 4, 3),
          dtypes=(F32, I32)),
    # bool: an or of ands (JAX's testDotGeneralContractAndBatch0; MIL's matmul takes no bool)
    *_dot("dot_general_batch_transposed", (((2,), (0,)), ((0,), (1,))), (3, 3, 2), (2, 3, 4),
          dtypes=(F32, BOOL), grad=False),
    *_dot("dot_pet_f32", (((1,), (0,)), ((), ())), (3, 4), (4, 2), dtypes=(BF16, F16),
          pet=jnp.float32),
    *_dot("dot_pet_i32", (((1,), (0,)), ((), ())), (3, 4), (4, 2), dtypes=("int8",),
          pet=jnp.int32),
]


def _reduce(name, fn, dtypes, grad=False, lo=-3, hi=3, shape=(3, 4, 5)):
    return over(name, fn, dtypes, lambda dt: args(arr(dt, *shape, lo=lo, hi=hi)), grad=grad)


REDUCE_CASES = [
    *_reduce("reduce_sum", lambda x: jnp.sum(x, axis=(0, 2)), FLOATS + INTS, grad=True),
    *_reduce("reduce_sum_all", lambda x: lax.reduce_sum(x, (0, 1, 2)), (F32, I32)),
    *_reduce("reduce_max", lambda x: jnp.max(x, axis=1), FLOATS + INTS, grad=True),
    *_reduce("reduce_min", lambda x: jnp.min(x, axis=(0, 1)), FLOATS + INTS, grad=True),
    *_reduce("reduce_prod", lambda x: jnp.prod(x, axis=2), FLOATS + (I32,), grad=True,
             lo=-1.5, hi=1.5),
    Case("reduce_max_nan_f32", lambda x: jnp.max(x, axis=1),
         args(const([[1.0, NAN, 3.0], [-INF, -1.0, -2.0]], F32))),
    Case("reduce_min_nan_f32", lambda x: jnp.min(x, axis=0),
         args(const([[1.0, NAN, 3.0], [-INF, -1.0, INF]], F32))),
    *_reduce("reduce_and", lambda x: lax.reduce_and(x, (1,)), (BOOL, I32, U32), lo=-9, hi=9),
    *_reduce("reduce_or", lambda x: lax.reduce_or(x, (0, 2)), (BOOL, I32, U32), lo=-9, hi=9),
    *_reduce("reduce_xor", lambda x: lax.reduce_xor(x, (2,)), (BOOL, I32, U32), lo=-9, hi=9),
    # lax.reduce with a non-identity init stays the generic `reduce` primitive
    Case("reduce_generic_add_f32", lambda x: lax.reduce(x, 1.5, lax.add, (1,)), args(f32(3, 4))),
    Case("reduce_generic_max_i32", lambda x: lax.reduce(x, 2, lax.max, (0, 1)),
         args(arr(I32, 3, 4, lo=-5, hi=5))),
    Case("all_any_bool", lambda x: (jnp.all(x, axis=0), jnp.any(x, axis=1)),
         args(arr(BOOL, 3, 4))),
    Case("mean_var_f32", lambda x: (jnp.mean(x, 1), jnp.var(x, 0)), args(f32(4, 5)), grad=False),
]

ARG_CASES = [
    *_reduce("argmax", lambda x: jnp.argmax(x, axis=1), FLOATS + INTS + (BOOL,), lo=0, hi=4),
    *_reduce("argmin", lambda x: jnp.argmin(x, axis=0), FLOATS + INTS + (BOOL,), lo=0, hi=4),
    # NaN wins and ties resolve to the lowest index
    Case("argmax_nan_ties_f32", lambda x: jnp.argmax(x, axis=1),
         args(const([[1.0, NAN, 3.0, NAN], [2.0, 5.0, 5.0, 1.0], [-INF, -INF, -INF, -INF]], F32))),
    Case("argmin_nan_ties_f32", lambda x: jnp.argmin(x, axis=1),
         args(const([[1.0, NAN, -3.0, NAN], [2.0, 1.0, 1.0, 3.0], [INF, INF, INF, INF]], F32))),
]


def _cum(name, fn, dtypes, grad=True, lo=-2, hi=2):
    return [*over(name, lambda x: fn(x, axis=1), dtypes,
                  lambda dt: args(arr(dt, 3, 5, lo=lo, hi=hi)), grad=grad),
            *over(f"{name}_reverse", lambda x: fn(x, axis=0, reverse=True), dtypes[:1],
                  lambda dt: args(arr(dt, 4, 3, lo=lo, hi=hi)), grad=grad)]


CUMULATIVE_CASES = [
    *_cum("cumsum", lax.cumsum, FLOATS + INTS),
    *_cum("cumprod", lax.cumprod, (F32, F16, I32), lo=-1.5, hi=1.5),
    *_cum("cummax", lax.cummax, (F32, F16, BF16, I32, U32)),
    *_cum("cummin", lax.cummin, (F32, F16, I32)),
    *_cum("cumlogsumexp", lax.cumlogsumexp, (F32, F16)),
    Case("cumsum_jnp_f32", lambda x: jnp.cumsum(x, axis=0), args(f32(4, 3)), grad=True),
    # half-precision running sums past 2,048 (float16) / 256 (bfloat16) ones: a sum kept in the
    # input's precision stalls there (MLX's own cumsum); XLA's reach 4,096
    *over("cumsum_long", lambda x: (lax.cumsum(x, axis=0), lax.cumsum(x, axis=0, reverse=True)),
          (F16, BF16), lambda dt: args(const(np.ones(4096), dt)), grad=True),
]

SORT_CASES = [
    *over("sort", lambda x: jnp.sort(x, axis=1), FLOATS + INTS,
          lambda dt: args(arr(dt, 3, 6, lo=0, hi=50)), grad=True),
    Case("sort_nan_f32", lambda x: jnp.sort(x, axis=0),
         args(const([[3.0, NAN], [NAN, -INF], [-0.0, 1.0], [1.0, INF]], F32))),
    Case("sort_bool", lambda x: lax.sort(x, dimension=1), args(arr(BOOL, 3, 6))),
    Case("argsort_f32", lambda x: jnp.argsort(x, axis=1, stable=True),
         args(ties(F32, 3, 6))),
    Case("argsort_descending_i32", lambda x: jnp.argsort(x, axis=0, descending=True),
         args(arr(I32, 5, 3, lo=0, hi=3))),
    Case("sort_two_operands", lambda k, v: lax.sort((k, v), dimension=0, num_keys=1),
         args(arr(I32, 6, 2, lo=0, hi=3), f32(6, 2))),
    Case("sort_num_keys2", lambda k1, k2, v: lax.sort((k1, k2, v), dimension=1, num_keys=2),
         args(arr(I32, 2, 8, lo=0, hi=2), ties(F32, 2, 8), arr(I32, 2, 8, lo=0, hi=99))),
]

TOPK_CASES = [
    *over("top_k", lambda x: lax.top_k(x, 3), FLOATS + (I32, U32),
          lambda dt: args(arr(dt, 4, 7, lo=0, hi=60)), grad=True),
    Case("top_k_ties_f32", lambda x: lax.top_k(x, 3),
         args(const([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]], F32))),
    Case("top_k_axis0_f32", lambda x: lax.top_k(x, 2, axis=0), args(f32(5, 3)), grad=True),
    Case("top_k_nan_f32", lambda x: lax.top_k(x, 2),
         args(const([[1.0, NAN, 3.0, -INF], [NAN, NAN, 0.0, 1.0]], F32))),
]

CASES = DOT_CASES + REDUCE_CASES + ARG_CASES + CUMULATIVE_CASES + SORT_CASES + TOPK_CASES
