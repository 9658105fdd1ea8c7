"""Known divergences of the coreml backend from JAX on CPU, each with its reason: by dtype
(DTYPE_DIVERGENCES, dtype name -> Expect) where the dtype is the reason, and by case
(DIVERGENCES, case name -> Expect) where the case is; tests/divergences.py resolves a case
against both (a per-case entry wins). Every entry raises the named error before anything runs;
no case has a looser tolerance."""
from .op_table import Expect

LOW, LEG = "LoweringError", "LegalizationError"
BF16 = ('Core ML has no bfloat16 tensors; refused before lowering (use float16/float32 or '
        'mlx)')
# uint32 / int64 / uint64 arguments are taken to hold int32-range values (checked at call
# time); what is computed from them is refused where it may leave int32 range
NARROW = 'Core ML integers are int32: uint32/int64/uint64 arguments are narrowed to int32 range, '
OVERFLOW = (NARROW + 'but this result (a sum, product, difference or offset of them) may leave '
            'int32 range, so it is refused rather than wrapped')
DIV = (NARROW + 'but integer division and remainder have no interval rule (a uint32 division by '
       'zero gives 2**32-1), so their results are not proven to fit')
CAST_U32 = ('Core ML integers are int32: converting negative int32 or float32 values to uint32 '
            'wraps or saturates beyond int32 range, so the conversion is refused')
CUM_UNSIGNED = ('the MIL lowering of cumulative max/min scans signed integers and floats only '
                '(it has no identity for an unsigned dtype)')
BITS = ('MIL has no bit-level ops (bitcast, bitwise and/or/xor/not on integers, shifts, '
        'population count, nextafter, total-order compares built on bitcast)')
SPECIAL = 'MIL has no inverse error function, log-gamma or digamma'
REDUCE_PRECISION = 'MIL has no op rounding to a narrower float format'
SELECT_GATHER = ('select_and_gather_add (forward-mode derivative of a max pool) has no MIL '
                 'lowering and no decomposition')
INT_CONV = 'MIL conv is floating-point only; an exact integer convolution is not lowered'

# jax_enable_x64 types (tests/test_x64.py)
F64 = 'Core ML has no float64 tensors; refused before lowering (compute in float32 or use xla)'

DTYPE_DIVERGENCES = {
    'bfloat16': Expect(reason=BF16, error=LOW),
    'float64': Expect(reason=F64, error=LOW),
}

DIVERGENCES = {
    'erf_inv_f32': Expect(reason=SPECIAL, error=LOW),
    'erf_inv_f16': Expect(reason=SPECIAL, error=LOW),
    'lgamma_f32': Expect(reason=SPECIAL, error=LOW),
    'lgamma_f16': Expect(reason=SPECIAL, error=LOW),
    'digamma_f32': Expect(reason=SPECIAL, error=LOW),
    'digamma_f16': Expect(reason=SPECIAL, error=LOW),
    'population_count_i32': Expect(reason=BITS, error=LOW),
    'nextafter_f32': Expect(reason=BITS, error=LOW),
    'nextafter_special_f32': Expect(reason=BITS, error=LOW),
    'and_i32': Expect(reason=BITS, error=LOW),
    'or_i32': Expect(reason=BITS, error=LOW),
    'xor_i32': Expect(reason=BITS, error=LOW),
    'shift_left_int32': Expect(reason=BITS, error=LOW),
    'shift_right_logical_int32': Expect(reason=BITS, error=LOW),
    'shift_right_arithmetic_int32': Expect(reason=BITS, error=LOW),
    'totalorder_lt_f32': Expect(reason=BITS, error=LEG),
    'totalorder_lt_f16': Expect(reason=BITS, error=LEG),
    'totalorder_lt_bf16': Expect(reason=BITS, error=LEG),
    'totalorder_le_f32': Expect(reason=BITS, error=LEG),
    'totalorder_le_f16': Expect(reason=BITS, error=LEG),
    'totalorder_le_bf16': Expect(reason=BITS, error=LEG),
    'totalorder_eq_f32': Expect(reason=BITS, error=LEG),
    'totalorder_eq_f16': Expect(reason=BITS, error=LEG),
    'totalorder_eq_bf16': Expect(reason=BITS, error=LEG),
    'searchsorted_compare_all_f32': Expect(reason=BITS, error=LEG),
    'bitcast_float32_to_int32': Expect(reason=BITS, error=LEG),
    'bitcast_int32_to_float32': Expect(reason=BITS, error=LEG),
    'bitcast_float32_to_uint32': Expect(reason=BITS, error=LEG),
    'bitcast_float16_to_int16': Expect(reason=BITS, error=LEG),
    'bitcast_float32_to_float16': Expect(reason=BITS, error=LEG),
    'bitcast_float16_to_float32': Expect(reason=BITS, error=LEG),
    'bitcast_bfloat16_to_float16': Expect(reason=BITS, error=LEG),
    'bitcast_uint32_to_uint8': Expect(reason=BITS, error=LEG),
    'reduce_precision_f32': Expect(reason=REDUCE_PRECISION, error=LEG),
    'reduce_precision_bf16': Expect(reason=REDUCE_PRECISION, error=LEG),
    'reduce_and_i32': Expect(reason=BITS, error=LOW),
    'reduce_or_i32': Expect(reason=BITS, error=LOW),
    'reduce_xor_i32': Expect(reason=BITS, error=LOW),
    'conv_i32_i32': Expect(reason=INT_CONV, error=LOW),
    'select_and_gather_add_f32': Expect(reason=SELECT_GATHER, error=LEG),
    # ---- uint32 ----
    'add_u32': Expect(reason=OVERFLOW, error=LOW),
    'mul_u32': Expect(reason=OVERFLOW, error=LOW),
    'sub_u32_wrap': Expect(reason=OVERFLOW, error=LOW),
    'reduce_sum_u32': Expect(reason=OVERFLOW, error=LOW),
    'cumsum_u32': Expect(reason=OVERFLOW, error=LOW),
    'scatter-add_u32': Expect(reason=OVERFLOW, error=LOW),
    'iota_broadcasted_u32': Expect(reason=OVERFLOW, error=LOW),
    'div_u32': Expect(reason=DIV, error=LOW),
    'rem_u32': Expect(reason=DIV, error=LOW),
    'convert_i32_to_ui32': Expect(reason=CAST_U32, error=LOW),
    'convert_f32_to_ui32': Expect(reason=CAST_U32, error=LOW),
    'cummax_u32': Expect(reason=CUM_UNSIGNED, error=LOW),
    'not_u32': Expect(reason=BITS, error=LOW),
    'population_count_u32': Expect(reason=BITS, error=LOW),
    'and_u32': Expect(reason=BITS, error=LOW),
    'or_u32': Expect(reason=BITS, error=LOW),
    'xor_u32': Expect(reason=BITS, error=LOW),
    'shift_left_uint32': Expect(reason=BITS, error=LOW),
    'shift_right_logical_uint32': Expect(reason=BITS, error=LOW),
    'shift_right_arithmetic_uint32': Expect(reason=BITS, error=LOW),
    'reduce_and_u32': Expect(reason=BITS, error=LOW),
    'reduce_or_u32': Expect(reason=BITS, error=LOW),
    'reduce_xor_u32': Expect(reason=BITS, error=LOW),
    # ---- jax_enable_x64 cases (tests/test_x64.py) ----
    'x64_bitcast': Expect(reason=BITS, error=LEG),
    'x64_add_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_add_u64': Expect(reason=OVERFLOW, error=LOW),
    'x64_mul_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_large_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_reduce_sum_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_cumsum_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_iota_i64': Expect(reason=OVERFLOW, error=LOW),
    'x64_div_rem_i64_signs': Expect(reason=DIV, error=LOW),
    'x64_shift_left_i64': Expect(reason=BITS, error=LOW),
    'x64_shift_right_logical_i64': Expect(reason=BITS, error=LOW),
    'x64_shift_right_arithmetic_i64': Expect(reason=BITS, error=LOW),
}

