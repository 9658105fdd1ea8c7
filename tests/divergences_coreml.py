"""Known divergences of the coreml backend from JAX on CPU, each with its reason: by dtype
(DTYPE_DIVERGENCES, dtype name -> Expect) where the dtype is the reason, and by case
(DIVERGENCES, case name -> Expect) where the case is; tests/divergences.py resolves a case
against both (a per-case entry wins). Every entry raises the named error before anything runs;
no case has a looser tolerance."""
from .op_table import Expect

LOW, LEG = "LoweringError", "LegalizationError"
BF16 = ('Core ML has no bfloat16 tensors; refused before lowering (use float16/float32 or '
        'mlx)')
U32 = ('Core ML integers are int32; uint32 values not provably below 2**31 (inputs, '
       'casts, wrapping arithmetic) are refused rather than reinterpreted')
BITS = ('MIL has no bit-level ops (bitcast, bitwise and/or/xor/not on integers, shifts, '
        'population count, nextafter, total-order compares built on bitcast)')
REDUCE_PRECISION = 'MIL has no op rounding to a narrower float format'
SELECT_GATHER = ('select_and_gather_add (forward-mode derivative of a max pool) has no MIL '
                 'lowering and no decomposition')
INT_CONV = 'MIL conv is floating-point only; an exact integer convolution is not lowered'

# jax_enable_x64 types (tests/test_x64.py)
F64 = 'Core ML has no float64 tensors; refused before lowering (compute in float32 or use xla)'
I64 = ('Core ML integers are int32; int64/uint64 inputs not provably within int32 range are '
       'refused rather than silently narrowed')

# in this order: a case with both float64 and int64 values is refused for its float64 ones
DTYPE_DIVERGENCES = {
    'bfloat16': Expect(reason=BF16, error=LOW),
    'uint32': Expect(reason=U32, error=LOW),
    'float64': Expect(reason=F64, error=LOW),
    'int64': Expect(reason=I64, error=LOW),
    'uint64': Expect(reason=I64, error=LOW),
}

DIVERGENCES = {
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
    # ---- jax_enable_x64 cases (tests/test_x64.py) ----
    'x64_bitcast': Expect(reason=BITS, error=LEG),
}

