"""Known divergences of the coreml backend from JAX on CPU, each with its reason: by dtype
(DTYPE_DIVERGENCES, dtype name -> Expect) where the dtype is the reason, and by case
(DIVERGENCES, case name -> Expect) where the case is; tests/divergences.py resolves a case
against both (a per-case entry wins). Every entry here is a program Core ML cannot run whole:
it runs with those ops placed on the host (`host=True`, fallback="host", matching JAX) and is
refused with fallback="error" (the LegalizationError naming every host op), except the entries
with an `error`, which Core ML refuses at call time with fallback="error" (uint32 arguments
beyond int32 range where the program runs whole on the device) and runs on the host, for that
call, with fallback="host" (runtime "+host-for-range"). Every other op-table case must run entirely on the
device. No case has a looser tolerance."""
from .op_table import Expect

BF16 = 'Core ML has no bfloat16 tensors: ops on them run on the host'
BF16_BOUNDARY = ('a bfloat16 argument read only by casts, or a bfloat16 result made by a cast, '
                 'travels as float32 on the device (converted on the host; '
                 'backends/coreml/passes/bfloat16.py)')
# uint32 / int64 / uint64 arguments are taken to hold int32-range values (checked at call
# time); what is computed from them runs on the host where it may leave int32 range
NARROW = 'Core ML integers are int32: uint32/int64/uint64 arguments are narrowed to int32 range, '
OVERFLOW = (NARROW + 'but this result (a sum, product, difference or offset of them) may leave '
            'int32 range, so it runs on the host rather than wrapped')
DIV = (NARROW + 'but integer division and remainder by a divisor that may be 0 have no interval '
       'rule (a uint32 division by zero gives 2**32-1), so their results are not proven to fit')
ABOVE_I32 = (NARROW + 'and every call checks its arguments: a call with uint32 values >= 2**31 '
             'runs on the host (fallback="host") or is refused (ArgumentRangeError, '
             'fallback="error"); mulhi_u32 runs the same program on the device)')
CAST_U32 = ('Core ML integers are int32: converting negative int32 or float32 values to uint32 '
            'wraps or saturates beyond int32 range, so the conversion runs on the host')
CUM_UNSIGNED = ('the MIL lowering of cumulative max/min scans signed integers and floats only '
                '(it has no identity for an unsigned dtype)')
BITS = ('MIL has no bit-level ops (bitcast, bitwise and/or/xor/not on integers, shifts, '
        'population count, nextafter, total-order compares built on bitcast)')
REDUCE_PRECISION = 'MIL has no op rounding to a narrower float format'
SELECT_GATHER = ('select_and_gather_add (forward-mode derivative of a max pool) has no MIL '
                 'lowering and no decomposition')
INT_CONV = 'MIL conv is floating-point only; an exact integer convolution is not lowered'

# jax_enable_x64 types (tests/test_x64.py)
F64 = 'Core ML has no float64 tensors: ops on them run on the host'


# linear algebra, FFTs, complex numbers (tests/op_table_linalg.py)
LINALG = ('MIL has no matrix decompositions or triangular solves: they run on the host')
COMPLEX = ('Core ML has no complex64 tensors: complex arguments and results are converted to '
           'and from their float32 parts on the host (the rest runs as float32 pairs)')

DTYPE_DIVERGENCES = {
    'bfloat16': Expect(reason=BF16, host=True),
    'float64': Expect(reason=F64, host=True),
    'complex64': Expect(reason=COMPLEX, host=True),
}

DIVERGENCES = {
    # bfloat16 only at the program's boundary: the whole case runs on the device
    'convert_f32_to_bf16': Expect(reason=BF16_BOUNDARY),
    'convert_bf16_to_f32': Expect(reason=BF16_BOUNDARY),
    'convert_f16_to_bf16': Expect(reason=BF16_BOUNDARY),
    'reduce_sum_bf16': Expect(reason=BF16_BOUNDARY),      # jnp.sum accumulates in float32
    'reduce_prod_bf16': Expect(reason=BF16_BOUNDARY),
    'cholesky_f32': Expect(reason=LINALG, host=True),
    'cholesky_batched_f32': Expect(reason=LINALG, host=True),
    'triangular_solve_llo_f32': Expect(reason=LINALG, host=True),
    'triangular_solve_lup_t_f32': Expect(reason=LINALG, host=True),
    'triangular_solve_rlo_unit_f32': Expect(reason=LINALG, host=True),
    'triangular_solve_rup_t_f32': Expect(reason=LINALG, host=True),
    'triangular_solve_batched_f32': Expect(reason=LINALG, host=True),
    'solve_triangular_f32': Expect(reason=LINALG, host=True),
    'cho_solve_f32': Expect(reason=LINALG, host=True),
    'gp_nll_f32': Expect(reason=LINALG, host=True),
    'lu_f32': Expect(reason=LINALG, host=True),
    'lu_batched_f32': Expect(reason=LINALG, host=True),
    'lu_factor_f32': Expect(reason=LINALG, host=True),
    'lu_pivots_to_permutation_i32': Expect(reason=LINALG, host=True),
    'qr_reduced_f32': Expect(reason=LINALG, host=True),
    'qr_complete_f32': Expect(reason=LINALG, host=True),
    'qr_batched_f32': Expect(reason=LINALG, host=True),
    'svd_f32': Expect(reason=LINALG, host=True),
    'svd_reduced_f32': Expect(reason=LINALG, host=True),
    'svd_values_f32': Expect(reason=LINALG, host=True),
    'eigh_lower_f32': Expect(reason=LINALG, host=True),
    'eigh_upper_f32': Expect(reason=LINALG, host=True),
    'eigh_values_f32': Expect(reason=LINALG, host=True),
    'eig_values_f32': Expect(reason=LINALG, host=True),
    'solve_f32': Expect(reason=LINALG, host=True),
    'solve_batched_f32': Expect(reason=LINALG, host=True),
    'inv_f32': Expect(reason=LINALG, host=True),
    'slogdet_f32': Expect(reason=LINALG, host=True),
    'pinv_f32': Expect(reason=LINALG, host=True),
    'lstsq_f32': Expect(reason=LINALG, host=True),
    'expm_f32': Expect(reason=LINALG, host=True),
    'population_count_i32': Expect(reason=BITS, host=True),
    'nextafter_f32': Expect(reason=BITS, host=True),
    'nextafter_special_f32': Expect(reason=BITS, host=True),
    'and_i32': Expect(reason=BITS, host=True),
    'or_i32': Expect(reason=BITS, host=True),
    'xor_i32': Expect(reason=BITS, host=True),
    'shift_left_int32': Expect(reason=BITS, host=True),
    'shift_right_logical_int32': Expect(reason=BITS, host=True),
    'shift_right_arithmetic_int32': Expect(reason=BITS, host=True),
    'totalorder_lt_f32': Expect(reason=BITS, host=True),
    'totalorder_lt_f16': Expect(reason=BITS, host=True),
    'totalorder_lt_bf16': Expect(reason=BITS, host=True),
    'totalorder_le_f32': Expect(reason=BITS, host=True),
    'totalorder_le_f16': Expect(reason=BITS, host=True),
    'totalorder_le_bf16': Expect(reason=BITS, host=True),
    'totalorder_eq_f32': Expect(reason=BITS, host=True),
    'totalorder_eq_f16': Expect(reason=BITS, host=True),
    'totalorder_eq_bf16': Expect(reason=BITS, host=True),
    'searchsorted_compare_all_f32': Expect(reason=BITS, host=True),
    'bitcast_float32_to_int32': Expect(reason=BITS, host=True),
    'bitcast_int32_to_float32': Expect(reason=BITS, host=True),
    'bitcast_float32_to_uint32': Expect(reason=BITS, host=True),
    'bitcast_float16_to_int16': Expect(reason=BITS, host=True),
    'bitcast_float32_to_float16': Expect(reason=BITS, host=True),
    'bitcast_float16_to_float32': Expect(reason=BITS, host=True),
    'bitcast_bfloat16_to_float16': Expect(reason=BITS, host=True),
    'bitcast_uint32_to_uint8': Expect(reason=BITS, host=True),
    'bitcast_scalar_float32_to_float16': Expect(reason=BITS, host=True),
    'bitcast_scalar_uint32_to_uint8': Expect(reason=BITS, host=True),
    'reduce_precision_f32': Expect(reason=REDUCE_PRECISION, host=True),
    'reduce_precision_bf16': Expect(reason=REDUCE_PRECISION, host=True),
    'reduce_and_i32': Expect(reason=BITS, host=True),
    'reduce_or_i32': Expect(reason=BITS, host=True),
    'reduce_xor_i32': Expect(reason=BITS, host=True),
    'conv_i32_i32': Expect(reason=INT_CONV, host=True),
    'select_and_gather_add_f32': Expect(reason=SELECT_GATHER, host=True),
    # ---- uint32 ----
    'add_u32': Expect(reason=OVERFLOW, host=True),
    'mul_u32': Expect(reason=OVERFLOW, host=True),
    'sub_u32_wrap': Expect(reason=OVERFLOW, host=True),
    'reduce_sum_u32': Expect(reason=OVERFLOW, host=True),
    'cumsum_u32': Expect(reason=OVERFLOW, host=True),
    'scatter-add_u32': Expect(reason=OVERFLOW, host=True),
    'iota_broadcasted_u32': Expect(reason=OVERFLOW, host=True),
    'div_u32': Expect(reason=DIV, host=True),
    'mulhi_u32_above_int32': Expect(reason=ABOVE_I32, error='ArgumentRangeError'),
    'rem_u32': Expect(reason=DIV, host=True),
    'convert_i32_to_ui32': Expect(reason=CAST_U32, host=True),
    'convert_f32_to_ui32': Expect(reason=CAST_U32, host=True),
    'cummax_u32': Expect(reason=CUM_UNSIGNED, host=True),
    'not_u32': Expect(reason=BITS, host=True),
    'population_count_u32': Expect(reason=BITS, host=True),
    'and_u32': Expect(reason=BITS, host=True),
    'or_u32': Expect(reason=BITS, host=True),
    'xor_u32': Expect(reason=BITS, host=True),
    'shift_left_uint32': Expect(reason=BITS, host=True),
    'shift_right_logical_uint32': Expect(reason=BITS, host=True),
    'shift_right_arithmetic_uint32': Expect(reason=BITS, host=True),
    'reduce_and_u32': Expect(reason=BITS, host=True),
    'reduce_or_u32': Expect(reason=BITS, host=True),
    'reduce_xor_u32': Expect(reason=BITS, host=True),
    # ---- jax_enable_x64 cases (tests/test_x64.py) ----
    'x64_bitcast': Expect(reason=BITS, host=True),
    'x64_add_i64': Expect(reason=OVERFLOW, host=True),
    'x64_add_u64': Expect(reason=OVERFLOW, host=True),
    'x64_mul_i64': Expect(reason=OVERFLOW, host=True),
    'x64_large_i64': Expect(reason=OVERFLOW, host=True),
    'x64_reduce_sum_i64': Expect(reason=OVERFLOW, host=True),
    'x64_cumsum_i64': Expect(reason=OVERFLOW, host=True),
    'x64_iota_i64': Expect(reason=OVERFLOW, host=True),
    'x64_div_rem_i64_signs': Expect(reason=DIV, host=True),
    'x64_shift_left_i64': Expect(reason=BITS, host=True),
    'x64_shift_right_logical_i64': Expect(reason=BITS, host=True),
    'x64_shift_right_arithmetic_i64': Expect(reason=BITS, host=True),
}



# ---- programs that run whole on the device where Core ML may still differ from JAX ----
# The MIL spec leaves these behaviours open and no lowering pins them at a reasonable cost
# (docs/mil-semantics.md). They are not op-table cases and the op-table tests do not read this
# table: tests/test_coreml_strict.py shows each entry, the strict MIL executor taking the other
# reading (test_device_divergence_<name>).
LONG_TIES = ('tie order unspecified on Core ML: along an axis longer than 32,767 elements '
             '(46,340 for an integer key) the tie-free int32 key of the sort / top_k lowering '
             'would overflow, so equal keys come in the order MIL argsort gives them, which the '
             'spec leaves open (values are JAX\'s; indices of equal keys, and -0 / +0, may differ)')
INT_WRAP = ('int32 add / sub / mul that overflow wrap modulo 2**32 as in JAX on the MIL '
            'executor; the MIL spec does not say what an overflowing int32 op gives')
POOL_GRAD_NAN = ('which position of a max-pool window holding NaN takes the cotangent is '
                 'unspecified (the first maximum of the numbers on the MIL executor; XLA selects '
                 'by a chain of >= comparisons that a NaN breaks)')
SIGNED_ZERO_MAX = ('max / min of +0 and -0 may give either zero: MIL\'s maximum / minimum are '
                   '`x > y ? x : y` / `x > y ? y : x`, which give y / x for equal operands, '
                   'where XLA on CPU gives max +0 and min -0')

DEVICE_DIVERGENCES = {
    'sort_long_axis_ties': Expect(reason=LONG_TIES),
    'top_k_long_axis_ties': Expect(reason=LONG_TIES),
    'int32_overflow': Expect(reason=INT_WRAP),
    'max_pool_backward_nan_window': Expect(reason=POOL_GRAD_NAN),
    'max_min_signed_zero': Expect(reason=SIGNED_ZERO_MAX),
}
