"""Known divergences of the coreml backend from JAX on CPU, each with its reason: by dtype
(DTYPE_DIVERGENCES, dtype name -> Expect) where the dtype is the reason, and by case
(DIVERGENCES, case name -> Expect) where the case is; tests/divergences.py resolves a case
against both (a per-case entry wins). Every entry here is a program Core ML cannot run whole:
it runs with those ops placed on the host (`host=True`, fallback="host", matching JAX) and is
refused with fallback="error" (`error`, the LegalizationError naming every host op). Every
other op-table case must run entirely on the device. No case has a looser tolerance."""
from .op_table import Expect

BF16 = 'Core ML has no bfloat16 tensors: ops on them run on the host'
U32 = ('Core ML integers are int32: ops on uint32 values not provably below 2**31 (casts, '
       'wrapping arithmetic) run on the host rather than reinterpreted')
BITS = ('MIL has no bit-level ops (bitcast, bitwise and/or/xor/not on integers, shifts, '
        'population count, nextafter, total-order compares built on bitcast)')
REDUCE_PRECISION = 'MIL has no op rounding to a narrower float format'
SELECT_GATHER = ('select_and_gather_add (forward-mode derivative of a max pool) has no MIL '
                 'lowering and no decomposition')
INT_CONV = 'MIL conv is floating-point only; an exact integer convolution is not lowered'

# jax_enable_x64 types (tests/test_x64.py)
F64 = 'Core ML has no float64 tensors: ops on them run on the host'
I64 = ('Core ML integers are int32: ops on int64/uint64 values not provably within int32 '
       'range run on the host rather than silently narrowed')

# in this order: a case with both float64 and int64 values is recorded for its float64 ones
DTYPE_DIVERGENCES = {
    'bfloat16': Expect(reason=BF16, host=True),
    'uint32': Expect(reason=U32, host=True),
    'float64': Expect(reason=F64, host=True),
    'int64': Expect(reason=I64, host=True),
    'uint64': Expect(reason=I64, host=True),
}

DIVERGENCES = {
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
    'reduce_precision_f32': Expect(reason=REDUCE_PRECISION, host=True),
    'reduce_precision_bf16': Expect(reason=REDUCE_PRECISION, host=True),
    'reduce_and_i32': Expect(reason=BITS, host=True),
    'reduce_or_i32': Expect(reason=BITS, host=True),
    'reduce_xor_i32': Expect(reason=BITS, host=True),
    'conv_i32_i32': Expect(reason=INT_CONV, host=True),
    'select_and_gather_add_f32': Expect(reason=SELECT_GATHER, host=True),
    # ---- jax_enable_x64 cases (tests/test_x64.py) ----
    'x64_bitcast': Expect(reason=BITS, host=True),
}

