"""OpKinds the MLX backend claims for legalization (the source of the coverage tables).

Only kinds with a rule in MLX_RULES (table.py, filled by the rules_* families) are listed; a test
asserts that claims and rules agree both ways. `Input` is bound by the interpreter itself.
"""
from ...ir.ops import OpKind as K

SUPPORTED_OPS = frozenset({
    # graph boundary
    K.Input, K.Constant,
    # elementwise
    K.Activation, K.Cast, K.Binary, K.Compare, K.Where, K.Bitcast, K.ReducePrecision, K.Iota,
    # contraction
    K.MatMul, K.DotGeneral,
    # reductions, scans, sorting
    K.Reduce, K.ArgMax, K.ArgMin, K.Cumsum, K.CumProd, K.CumMax, K.CumMin, K.CumLogSumExp,
    K.Sort, K.TopK,
    # shape and data movement
    K.Reshape, K.Transpose, K.Narrow, K.Slice, K.Concat, K.Expand, K.Reverse, K.Pad,
    K.DynamicSlice, K.DynamicUpdateSlice,
    # indexing
    K.Gather, K.Scatter, K.ScatterAdd,
    # convolution and windows
    K.Conv, K.Pool, K.SelectAndScatterAdd, K.SelectAndGatherAdd,
    # high-level forward (rules_nn.py: mx.fast kernels or short MLX compositions)
    K.Softmax, K.LogSoftmax, K.LayerNorm, K.RmsNorm, K.GroupNorm, K.Attention, K.Rope,
    K.AdaLayerNorm, K.GatedResidual, K.SoftmaxCrossEntropyWithLogits,
    # control flow (rules_control.py: If as a select, While and long Scans as host loops)
    K.If, K.While, K.Scan,
    # linear algebra, FFTs and complex parts (rules_linalg.py: mx.linalg on the CPU stream,
    # mx.fft; variants without an MLX kernel go to the host, rules_linalg.host_reason)
    K.Cholesky, K.TriangularSolve, K.Lu, K.LuPivotsToPermutation, K.Qr, K.Svd, K.Eigh, K.Eig,
    K.Fft, K.Complex, K.Real, K.Imag, K.Conjugate,
    # collectives over the processes of rlx_jax.distributed (rules_collectives.py:
    # mx.distributed inside the compiled program)
    K.AllReduce, K.AllGather, K.ReduceScatter, K.AxisIndex, K.Ppermute,
    # optimizer updates recognised from optax (rules_optim.py)
    K.AdamUpdate,
})

# Backward kinds with a dedicated MLX lowering (kept by legalization when native backward is on).
NATIVE_BACKWARD_OPS = frozenset({
    K.ReluBackward, K.ActivationBackward,
    K.LayerNormBackwardInput, K.LayerNormBackwardGamma,
    K.RmsNormBackwardInput, K.RmsNormBackwardGamma, K.RmsNormBackwardBeta,
    K.GroupNormBackwardInput, K.GroupNormBackwardGamma, K.GroupNormBackwardBeta,
    K.AttentionBackward, K.RopeBackward, K.SoftmaxCrossEntropyBackward,
    K.AdaLayerNormBackward, K.GatedResidualBackward,
    K.Conv2dBackwardInput, K.Conv2dBackwardWeight, K.MaxPool2dBackward,
    K.CumsumBackward, K.GatherBackward,
})

# Backward kinds MLX runs only through their decomposition (read by device probes only).
BACKWARD_OPS = frozenset()

SUPPORTED_OPS_TRAINING = SUPPORTED_OPS | NATIVE_BACKWARD_OPS
