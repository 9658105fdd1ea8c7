"""OpKind: the closed set of RLX IR operations.

Names follow the RLX claim tables (one name per kind, CamelCase). Every kind here is produced
(by the frontend, a recognizer, an `rlx_jax.nn` primitive or a decomposition) and lowered by
some backend; the RLX kinds no JAX program reaches yet are listed in ir/reserved.py with how one
could. Kinds that JAX semantics need and RLX lacks are marked in EXTENSIONS. Sub-operations (which unary function, which binary
operator, which reduction) are node attributes, drawn from the closed sets below.
"""
import enum


class OpKind(enum.Enum):
    def __repr__(self):
        return self.name

    # graph boundary
    Input = "Input"
    Constant = "Constant"
    # elementwise
    Activation = "Activation"
    Cast = "Cast"
    Binary = "Binary"
    Compare = "Compare"
    Where = "Where"
    # contraction
    MatMul = "MatMul"
    DotGeneral = "DotGeneral"
    # reductions and scans
    Reduce = "Reduce"
    ArgMax = "ArgMax"
    ArgMin = "ArgMin"
    Cumsum = "Cumsum"
    CumProd = "CumProd"
    CumMax = "CumMax"
    Sort = "Sort"
    TopK = "TopK"
    # shape and data movement
    Reshape = "Reshape"
    Transpose = "Transpose"
    Narrow = "Narrow"
    Concat = "Concat"
    Expand = "Expand"
    Reverse = "Reverse"
    Gather = "Gather"
    ScatterAdd = "ScatterAdd"
    # convolution and pooling
    Conv = "Conv"
    Pool = "Pool"
    # high-level forward
    Softmax = "Softmax"
    LogSoftmax = "LogSoftmax"
    LayerNorm = "LayerNorm"
    RmsNorm = "RmsNorm"
    GroupNorm = "GroupNorm"
    Attention = "Attention"
    Rope = "Rope"
    AdaLayerNorm = "AdaLayerNorm"
    GatedResidual = "GatedResidual"
    LoraMatMul = "LoraMatMul"
    DequantMatMul = "DequantMatMul"          # rlx_jax extension semantics (reference_quant.py)
    SoftmaxCrossEntropyWithLogits = "SoftmaxCrossEntropyWithLogits"
    SoftmaxCrossEntropy = "SoftmaxCrossEntropy"      # dense labels (ir/reference_xent.py)
    # autodiff backward
    ReluBackward = "ReluBackward"
    ActivationBackward = "ActivationBackward"
    LayerNormBackwardInput = "LayerNormBackwardInput"
    LayerNormBackwardGamma = "LayerNormBackwardGamma"
    RmsNormBackwardInput = "RmsNormBackwardInput"
    RmsNormBackwardGamma = "RmsNormBackwardGamma"
    RmsNormBackwardBeta = "RmsNormBackwardBeta"
    GroupNormBackwardInput = "GroupNormBackwardInput"
    GroupNormBackwardGamma = "GroupNormBackwardGamma"
    GroupNormBackwardBeta = "GroupNormBackwardBeta"
    AttentionBackward = "AttentionBackward"
    RopeBackward = "RopeBackward"
    SoftmaxCrossEntropyBackward = "SoftmaxCrossEntropyBackward"
    # rlx_jax extension semantics: SoftmaxCrossEntropy's gradient (ir/reference_xent.py)
    SoftmaxCrossEntropyDenseBackward = "SoftmaxCrossEntropyDenseBackward"
    AdaLayerNormBackward = "AdaLayerNormBackward"
    GatedResidualBackward = "GatedResidualBackward"
    MaxPool2dBackward = "MaxPool2dBackward"
    Conv2dBackwardInput = "Conv2dBackwardInput"
    Conv2dBackwardWeight = "Conv2dBackwardWeight"
    CumsumBackward = "CumsumBackward"
    GatherBackward = "GatherBackward"
    # control flow and recurrence
    If = "If"
    While = "While"
    Scan = "Scan"
    Lstm = "Lstm"
    Gru = "Gru"
    Rnn = "Rnn"
    # linear algebra
    Cholesky = "Cholesky"
    TriangularSolve = "TriangularSolve"
    Svd = "Svd"
    Qr = "Qr"
    Eigh = "Eigh"
    # signal processing
    Fft = "Fft"
    Conjugate = "Conjugate"

    # ---- rlx_jax extensions: JAX semantics RLX has no kind for ----
    CumMin = "CumMin"
    CumLogSumExp = "CumLogSumExp"
    Iota = "Iota"
    Pad = "Pad"
    Slice = "Slice"
    DynamicSlice = "DynamicSlice"
    DynamicUpdateSlice = "DynamicUpdateSlice"
    Bitcast = "Bitcast"
    ReducePrecision = "ReducePrecision"
    Scatter = "Scatter"
    SelectAndScatterAdd = "SelectAndScatterAdd"
    SelectAndGatherAdd = "SelectAndGatherAdd"
    # randomness: JAX's typed PRNG keys (ir/prng.py) and the threefry hash
    RandomSeed = "RandomSeed"
    RandomWrap = "RandomWrap"
    RandomUnwrap = "RandomUnwrap"
    RandomBits = "RandomBits"
    RandomSplit = "RandomSplit"
    RandomFoldIn = "RandomFoldIn"
    RandomGamma = "RandomGamma"
    ThreeFry2x32 = "ThreeFry2x32"
    # linear algebra and complex numbers JAX has and RLX names no kind for
    Lu = "Lu"
    LuPivotsToPermutation = "LuPivotsToPermutation"
    Eig = "Eig"
    Complex = "Complex"
    Real = "Real"
    Imag = "Imag"
    # collectives over the named axis of rlx_jax.jit(axis_name=...): the processes of an
    # rlx_jax.distributed group (ir/reference_collectives.py)
    AllReduce = "AllReduce"
    AllGather = "AllGather"
    ReduceScatter = "ReduceScatter"
    AxisIndex = "AxisIndex"
    Ppermute = "Ppermute"
    # optax's Adam step over a group of parameter leaves (ir/reference_optim.py)
    AdamUpdate = "AdamUpdate"
    # optax.sgd with momentum over a group of parameter leaves (ir/reference_sgd.py)
    SgdMomentumUpdate = "SgdMomentumUpdate"
    # optax's Lion step over a group of parameter leaves (ir/reference_optim.py)
    LionUpdate = "LionUpdate"
    # a JAX primitive with no RLX kind yet, kept as it is: it runs as JAX, on the host
    HostPrimitive = "HostPrimitive"
    # a symbolic dimension's value as data (jax's dim_as_value, e.g. jnp.mean's divisor over a
    # symbolic axis): only in graphs with symbolic shapes; ir/instantiate.py makes it a Constant
    DimSize = "DimSize"


EXTENSIONS = frozenset({
    OpKind.CumMin, OpKind.CumLogSumExp, OpKind.Iota, OpKind.Pad, OpKind.Slice,
    OpKind.DynamicSlice, OpKind.DynamicUpdateSlice, OpKind.Bitcast, OpKind.ReducePrecision,
    OpKind.Scatter, OpKind.SelectAndScatterAdd, OpKind.SelectAndGatherAdd,
    OpKind.RandomSeed, OpKind.RandomWrap, OpKind.RandomUnwrap, OpKind.RandomBits,
    OpKind.RandomSplit, OpKind.RandomFoldIn, OpKind.RandomGamma, OpKind.ThreeFry2x32,
    OpKind.Lu, OpKind.LuPivotsToPermutation, OpKind.Eig, OpKind.Complex, OpKind.Real,
    OpKind.Imag, OpKind.AllReduce, OpKind.AllGather, OpKind.ReduceScatter, OpKind.AxisIndex,
    OpKind.Ppermute, OpKind.DimSize,
})

# Collectives (rlx_jax extensions): every one carries attrs axis_name and axis_size (the group
# size the program was traced for); only MLX runs them on more than one process.
COLLECTIVES = frozenset({OpKind.AllReduce, OpKind.AllGather, OpKind.ReduceScatter,
                         OpKind.AxisIndex, OpKind.Ppermute})

# JAX's randomness (rlx_jax extensions): the kinds on typed keys (the key dtypes of
# ir/prng.py), which passes/decompose/keys.py rewrites to physical uint32 data for backends
# that do not claim them, and ThreeFry2x32, the hash threefry's come down to (decomposed into
# uint32 add/xor/shift/or).
KEY_KINDS = frozenset({
    OpKind.RandomSeed, OpKind.RandomWrap, OpKind.RandomUnwrap, OpKind.RandomBits,
    OpKind.RandomSplit, OpKind.RandomFoldIn, OpKind.RandomGamma,
})
RANDOM = KEY_KINDS | {OpKind.ThreeFry2x32}

# Linear algebra (JAX's lax.linalg primitives, same operands, attributes and results), FFTs and
# the complex-number kinds; their reference semantics are in ir/reference_linalg.py.
LINALG = frozenset({
    OpKind.Cholesky, OpKind.TriangularSolve, OpKind.Lu, OpKind.LuPivotsToPermutation,
    OpKind.Qr, OpKind.Svd, OpKind.Eigh, OpKind.Eig,
})
SPECTRAL = frozenset({OpKind.Fft, OpKind.Complex, OpKind.Real, OpKind.Imag, OpKind.Conjugate})

# Optimizer updates (rlx_jax extensions, not emitted by the frontend): recognised from optax's
# update formulas (passes/recognize_optim.py), one node per group of leaves sharing a step count
# and hyperparameters; semantics in ir/reference_optim.py.
OPTIMIZER = frozenset({OpKind.AdamUpdate, OpKind.SgdMomentumUpdate, OpKind.LionUpdate})

# The kinds the jaxpr frontend emits and the reference backend lowers (the primitive IR).
PRIMITIVE = frozenset({
    OpKind.Input, OpKind.Constant, OpKind.Activation, OpKind.Cast, OpKind.Binary,
    OpKind.Compare, OpKind.Where, OpKind.MatMul, OpKind.DotGeneral, OpKind.Reduce,
    OpKind.ArgMax, OpKind.ArgMin, OpKind.Cumsum, OpKind.CumProd, OpKind.CumMax, OpKind.Sort,
    OpKind.TopK, OpKind.Reshape, OpKind.Transpose, OpKind.Narrow, OpKind.Concat, OpKind.Expand,
    OpKind.Reverse, OpKind.Gather, OpKind.ScatterAdd, OpKind.Conv, OpKind.Pool,
}) | EXTENSIONS | LINALG | SPECTRAL

# A JAX primitive the frontend keeps as it is (attrs: the primitive and its params); only the
# reference backend (xla) runs it, so on every other backend it runs in a host segment.
HOST_ONLY = frozenset({OpKind.HostPrimitive})

# Control flow: nodes that carry regions (Node.regions), re-emitted as lax control flow by xla.
CONTROL = frozenset({OpKind.If, OpKind.While, OpKind.Scan})

# High-level forward kinds produced by rlx_jax.nn primitives (LoraMatMul, DequantMatMul: by
# recognition only).
FORWARD = frozenset({
    OpKind.Softmax, OpKind.LogSoftmax, OpKind.LayerNorm, OpKind.RmsNorm, OpKind.GroupNorm, OpKind.Attention,
    OpKind.Rope, OpKind.AdaLayerNorm, OpKind.GatedResidual,
    OpKind.LoraMatMul, OpKind.DequantMatMul,
    OpKind.SoftmaxCrossEntropyWithLogits,
    OpKind.SoftmaxCrossEntropy,       # by recognition only (passes/pattern_xent.py)
    # by recognition only (passes/recognize_rnn.py; ir/reference_rnn.py)
    OpKind.Lstm, OpKind.Gru, OpKind.Rnn,
})

BACKWARD = frozenset(k for k in OpKind if "Backward" in k.name)

# Closed sub-operation sets (node attribute "fn").
UNARY_FNS = frozenset("""
    neg abs sign floor ceil round is_finite exp exp2 log log1p expm1 tanh sigmoid sin cos tan
    asin acos atan sinh cosh asinh acosh atanh sqrt rsqrt cbrt square erf erfc erf_inv lgamma
    digamma not population_count integer_pow relu gelu gelu_tanh silu
""".split())
BINARY_FNS = frozenset("""
    add sub mul div rem pow max min atan2 nextafter and or xor
    shift_left shift_right_logical shift_right_arithmetic
""".split())
COMPARE_FNS = frozenset("eq ne lt le gt ge".split())
REDUCE_FNS = frozenset("sum max min prod and or xor".split())
POOL_FNS = frozenset("sum max min".split())
SCATTER_FNS = frozenset("replace add mul min max".split())
