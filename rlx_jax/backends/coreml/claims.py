"""Core ML claim tables (DESIGN §5), mirroring the RLX Core ML claim tables.

SUPPORTED_OPS          kinds the MIL lowering (MIL_RULES) lowers itself
NATIVE_BACKWARD_OPS    backward kinds with a native MIL kernel (kept by legalization)
BACKWARD_OPS           backward kinds run only by decomposition (device probe only)
SUPPORTED_OPS_TRAINING SUPPORTED_OPS ∪ NATIVE_BACKWARD_OPS
REWRITTEN_OPS          kinds no MIL rule lowers that the backend's own rewrite (`prepare`)
                       turns into supported kinds where it can; the rest run on the host

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
    K.Reduce, K.ArgMax, K.ArgMin, K.Cumsum, K.CumProd, K.CumMax, K.CumMin, K.CumLogSumExp,
    K.Sort, K.TopK,
    # shape and data movement
    K.Reshape, K.Transpose, K.Narrow, K.Concat, K.Expand, K.Reverse, K.Iota, K.Pad, K.Slice,
    K.DynamicSlice, K.DynamicUpdateSlice,
    # indexing
    K.Gather, K.ScatterAdd, K.Scatter,
    # convolution and pooling
    K.Conv, K.Pool, K.SelectAndScatterAdd,
    # high-level forward kinds (native MIL kernels: mil_nn*.py)
    K.Softmax, K.LogSoftmax, K.LayerNorm, K.RmsNorm, K.GroupNorm, K.Attention, K.Rope,
    K.AdaLayerNorm, K.GatedResidual, K.SoftmaxCrossEntropyWithLogits,
    # control flow (mil_control.py: cond / while_loop, iOS15+ MIL ops)
    K.If, K.While, K.Scan,
    # optimizer updates recognised from optax (mil_optim.py: small leaves updated in batches)
    K.AdamUpdate,
})

# Native MIL backward kernels (mil_nn*.py); CLAIM_PREDICATES narrows some to the
# configurations their kernel handles (other nodes of those kinds are decomposed).
NATIVE_BACKWARD_OPS = frozenset({
    K.RmsNormBackwardInput, K.RmsNormBackwardGamma, K.RmsNormBackwardBeta,
    K.LayerNormBackwardInput, K.LayerNormBackwardGamma,
    K.GroupNormBackwardInput, K.GroupNormBackwardGamma, K.GroupNormBackwardBeta,
    K.MaxPool2dBackward, K.Conv2dBackwardInput, K.Conv2dBackwardWeight, K.AttentionBackward,
    K.SoftmaxCrossEntropyBackward, K.AdaLayerNormBackward, K.GatedResidualBackward,
})

# Their decomposition is already the minimal MIL (dy·f'(x), a rope with sin negated, ...).
BACKWARD_OPS = frozenset({
    K.ReluBackward, K.ActivationBackward, K.RopeBackward, K.CumsumBackward, K.GatherBackward,
})

from .mil_nn_conv import CLAIM_PREDICATES  # noqa: E402

SUPPORTED_OPS_TRAINING = SUPPORTED_OPS | NATIVE_BACKWARD_OPS

# complex64 values as float32 (re, im) pairs, FFTs as DFT matmuls (complex_pairs.py): left
# on the host only at the program's complex boundary and for Ffts above the length limit
REWRITTEN_OPS = frozenset({K.Fft, K.Complex, K.Real, K.Imag, K.Conjugate})
