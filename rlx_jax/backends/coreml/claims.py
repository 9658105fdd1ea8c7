"""Core ML claim tables (DESIGN §5), mirroring the RLX Core ML claim tables.

SUPPORTED_OPS          kinds the MIL lowering (MIL_RULES) lowers itself
NATIVE_BACKWARD_OPS    backward kinds with a native MIL kernel (kept by legalization)
BACKWARD_OPS           backward kinds run only by decomposition (device probe only)
SUPPORTED_OPS_TRAINING SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS

A test asserts that these tables and MIL_RULES agree both ways.
"""
from ...ir.ops import OpKind as K

SUPPORTED_OPS = frozenset({
    K.Input, K.Constant,
    # elementwise
    K.Activation, K.Cast, K.Binary, K.Compare, K.Where,
    # contraction
    K.MatMul, K.DotGeneral,
    # reductions, scans, sorting
    K.Reduce, K.ArgMax, K.ArgMin, K.Cumsum, K.Sort, K.TopK,
    # shape and data movement
    K.Reshape, K.Transpose, K.Narrow, K.Concat, K.Expand, K.Reverse, K.Iota, K.Pad, K.Slice,
    K.DynamicSlice,
    # indexing
    K.Gather, K.ScatterAdd, K.Scatter,
    # convolution and pooling
    K.Conv, K.Pool,
})

NATIVE_BACKWARD_OPS = frozenset()

BACKWARD_OPS = frozenset({
    K.ReluBackward, K.ActivationBackward, K.LayerNormBackwardInput, K.LayerNormBackwardGamma,
    K.RmsNormBackwardInput, K.RmsNormBackwardGamma, K.RmsNormBackwardBeta,
    K.GroupNormBackwardInput, K.GroupNormBackwardGamma, K.GroupNormBackwardBeta,
    K.RopeBackward, K.AttentionBackward, K.SoftmaxCrossEntropyBackward, K.CumsumBackward,
    K.GatherBackward, K.MaxPool2dBackward, K.Conv2dBackwardInput, K.Conv2dBackwardWeight,
    K.AdaLayerNormBackward, K.GatedResidualBackward,
})

SUPPORTED_OPS_TRAINING = SUPPORTED_OPS | NATIVE_BACKWARD_OPS
