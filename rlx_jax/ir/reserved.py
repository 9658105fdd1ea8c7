"""The reserved kinds: RLX IR kinds that no JAX program reaches yet, and how one could.

The RLX op set (its claim tables) names more kinds than rlx_jax produces. A kind is in
`ir/ops.py`'s OpKind only when the frontend, a recognizer, an `rlx_jax.nn` primitive or a
decomposition produces it and some backend lowers it; the others are listed here, by their RLX
name, each with the JAX code that would reach it and what would have to produce it. A kind
moves into OpKind together with the rule that produces it and the rules that lower it.
`docs/op-coverage.md` lists them (`python -m rlx_jax.coverage --write`).
"""

_FUSION = ("a fusion a backend forms after recognition; MLX's `mx.compile` fuses these "
           "chains already, so it would serve a backend with hand-written kernels")
_QUANT_MATMUL = ("an int8/int4 weight times its scale feeding a contraction "
                 "(`(w_q.astype(bf16) * scale) @ x`, AQT-style int8 layers): a recognizer "
                 "on Cast → Binary[mul] → DotGeneral, lowered by `mx.quantized_matmul` and "
                 "Core ML's `constexpr_blockwise_shift_scale`")
_SPD = ("SPD-manifold networks (SPDNet) written with `jnp.linalg.eigh`: `rlx_jax.nn` "
        "primitives with their own backward rules would produce it")
_SPLAT = ("Gaussian-splatting renderers written in JAX: an `rlx_jax.nn` primitive (forward and "
          "backward) would produce it")

RESERVED = {
    # boundary and elementwise
    "Param": "a jitted function's parameters are graph Inputs and its closed-over arrays "
             "Constants; a weight bound at export (an `export_coreml` weight file) would be one",
    "Fma": "lax has no fused multiply-add primitive; a recognizer for `a * b + c` where one "
           "rounding is wanted",
    "StopGradient": "rlx_jax traces after JAX's autodiff, where `lax.stop_gradient` is the "
                    "identity; only an IR differentiated by rlx_jax itself would keep it",
    "ElementwiseRegion": _FUSION + " (an elementwise chain)",
    "TransformRegion": _FUSION + " (a chain of shape ops)",
    "BatchElementwiseRegion": _FUSION + " (an elementwise chain over a batch)",
    # contraction
    "GroupedMatMul": "`lax.ragged_dot` (mixture-of-experts layers; a HostPrimitive today)",
    "ArgSort": "`jnp.argsort` traces to a two-operand `sort` with an iota, which Sort lowers; a "
               "recognizer for that pair",
    # data movement: special cases of lax.gather / lax.scatter
    "GatherNd": "`x[i, j]` with a full index tuple is lax.gather (Gather); a recognizer on its "
                "dimension numbers",
    "GatherElements": "`jnp.take_along_axis` is lax.gather (Gather); a recognizer on its "
                      "dimension numbers",
    "ScatterNd": "`x.at[i, j].set(v)` is lax.scatter (Scatter); a recognizer on its dimension "
                 "numbers",
    "ScatterElements": "`jnp.put_along_axis` is lax.scatter (Scatter); a recognizer",
    # convolution, pooling, resizing
    "Conv3d": "flax `nn.Conv` with a 3-D kernel is `conv_general_dilated`, translated to Conv "
              "(every rank); a kind for a backend whose kernel is 3-D only",
    "ConvTranspose2d": "`lax.conv_transpose` (flax `nn.ConvTranspose`) is `conv_general_dilated` "
                       "with lhs dilation, translated to Conv; a recognizer on lhs_dilation",
    "ConvTranspose3d": "as ConvTranspose2d, over 3 spatial dims",
    "Conv3dBackwardInput": "`jax.grad` of a 3-D convolution: the 3-D analogue of the recognized "
                           "Conv2dBackwardInput (passes/recognize.py)",
    "Conv3dBackwardWeight": "as Conv3dBackwardInput, for the kernel's gradient",
    "Im2Col": "a lowering strategy of Conv (no JAX primitive), for a backend that convolves by "
              "matmul",
    "ResizeNearest2x": "`jax.image.resize(x, ..., 'nearest')` at twice the size traces to "
                       "gathers; a recognizer",
    "Interpolate3d": "`jax.image.resize` over 3 spatial dims (trilinear) traces to dots; a "
                     "recognizer",
    "MaxPool3dBackward": "`jax.grad` of a 3-D max pool (select_and_scatter_add over three "
                         "window dims), the 3-D analogue of MaxPool2dBackward",
    # high-level forward
    "LayerNorm2d": "a LayerNorm over the channel axis of NCHW (ConvNeXt blocks): a LayerNorm "
                   "pattern on axis 1",
    "BatchNormInference": "flax `nn.BatchNorm(use_running_average=True)`, "
                          "`(x - mean) * rsqrt(var + eps) * scale + bias` with constant "
                          "statistics: a pattern in passes/pattern_table.py",
    "BatchNormInferenceBackwardInput": "`jax.grad` through BatchNormInference, recognized as "
                                       "the other norms' backward kinds are",
    "BatchNormInferenceBackwardGamma": "`jax.grad` through BatchNormInference, recognized as "
                                       "the other norms' backward kinds are",
    "BatchNormInferenceBackwardBeta": "`jax.grad` through BatchNormInference, recognized as "
                                      "the other norms' backward kinds are",
    "AxialRope2d": "2-D rotary embeddings of vision transformers: a Rope pattern over two axes",
    "FusedAttentionBlock": _FUSION + " (attention with its projections)",
    "FusedTransformerLayer": _FUSION + " (a whole transformer layer)",
    "FusedSwiGLU": _FUSION + " (`silu(x @ w1) * (x @ w3)`)",
    "FusedMatMulBiasAct": _FUSION + " (matmul, bias, activation)",
    "FusedResidualLN": _FUSION + " (residual add, LayerNorm)",
    "FusedResidualRmsNorm": _FUSION + " (residual add, RmsNorm)",
    "FusedConvBiasAct": _FUSION + " (convolution, bias, activation)",
    # control flow and recurrence
    "ScanBackward": "JAX differentiates a scan into another scan (Scan); a kind for a backend "
                    "with a native backward scan",
    "ScanBackwardXs": "as ScanBackward, for the gradient of the scanned inputs",
    "SelectiveScan": "Mamba's selective scan written with `lax.scan` or "
                     "`lax.associative_scan`: a recognizer on the recurrence",
    "GatedDeltaNet": "gated delta-rule linear attention written with `lax.scan`: a recognizer",
    "Mamba2": "a Mamba-2 block (`lax.scan` over its state-space recurrence): a recognizer",
    # randomness
    "RngNormal": "`jax.random.normal` traces to threefry bits and arithmetic (RandomBits, "
                 "ThreeFry2x32); a backend generator would not be bit-exact with JAX",
    "RngUniform": "`jax.random.uniform`, as RngNormal is reached",
    "Sample": "`jax.random.categorical`, as RngNormal is reached",
    # quantization
    "Quantize": "`jnp.round(x / scale).astype(jnp.int8)`: a recognizer",
    "Dequantize": "`w_q.astype(jnp.float32) * scale`: a recognizer",
    "DequantGroupedMatMul": _QUANT_MATMUL + " (per group of rows)",
    "DequantGroupedMatMulMlx": _QUANT_MATMUL + " (MLX's group layout)",
    "DequantMoEWeights": _QUANT_MATMUL + " (expert weights)",
    "QMatMul": "int8 × int8 matmuls with an int32 accumulator "
               "(`lax.dot_general(..., preferred_element_type=jnp.int32)` on int8 operands, "
               "today a DotGeneral)",
    "QConv2d": "int8 convolutions (`conv_general_dilated` on int8 operands with an int32 "
               "accumulator, today a Conv)",
    "FakeQuantize": "quantization-aware training, `x + lax.stop_gradient(jnp.round(x / s) * s "
                    "- x)` (straight-through estimator): a recognizer",
    "FakeQuantizeBackward": "`jax.grad` through FakeQuantize (its straight-through gradient)",
    "FakeQuantizeLSQ": "FakeQuantize with a learned scale (LSQ): a recognizer",
    "FakeQuantizeLSQBackwardX": "`jax.grad` through FakeQuantizeLSQ, for the input",
    "FakeQuantizeLSQBackwardScale": "`jax.grad` through FakeQuantizeLSQ, for the scale",
    "ScaledMatMul": "fp8 training with `jax.nn.scaled_matmul` / `scaled_dot_general`",
    "ScaledQuantize": "the fp8 quantization of `jax.nn.scaled_matmul`'s operands",
    "ScaledQuantScale": "the scale computation of fp8 training recipes",
    "ScaledDequantize": "the fp8 dequantization of `jax.nn.scaled_matmul`",
    # linear algebra
    "DenseSolve": "`jnp.linalg.solve` traces to lu and two triangular solves (Lu, "
                  "TriangularSolve); a recognizer",
    "BatchedDenseSolve": "`jnp.linalg.solve` over a batch: as DenseSolve",
    "Det": "`jnp.linalg.det` traces to lu and a product of the diagonal; a recognizer",
    "LogDet": "`jnp.linalg.slogdet`, as Det is reached",
    "EighBackward": "JAX differentiates eigh by its own rule, in primitive kinds; a kind for a "
                    "backend with a native backward",
    "EighBatch": "`jnp.linalg.eigh` over a batch is Eigh over leading dims",
    "EighBatchBackward": "as EighBackward, over a batch",
    # signal, geometry and domain ops
    "FftButterflyStage": "a lowering strategy of Fft for backends with no FFT (Core ML "
                         "lowers Fft as DFT matmuls instead)",
    "LogMel": "audio front ends, `log(|rfft(frames)|² @ mel)`: a recognizer",
    "LogMelBackward": "`jax.grad` through a LogMel front end",
    "WelchPeaks": "Welch spectra (`jax.scipy.signal.welch`) and their peaks: a recognizer",
    "ComplexNormSq": "`jnp.abs(z) ** 2` / `(z * z.conj()).real` on complex arrays: a "
                     "recognizer",
    "ComplexNormSqBackward": "`jax.grad` through a ComplexNormSq pattern",
    "GaussianSplatRender": _SPLAT,
    "GaussianSplatRenderBackward": _SPLAT,
    "GaussianSplatPrepare": _SPLAT,
    "GaussianSplatRasterize": _SPLAT,
    "BiMap": _SPD,
    "ReEig": _SPD,
    "ReEigBackward": _SPD,
    "LogEig": _SPD,
    "LogEigBackward": _SPD,
    "SpdBatchNorm": _SPD,
    "SpdBatchNormBackwardX": _SPD,
    "SpdBatchNormBackwardG": _SPD,
    "SpdKarcherMean": _SPD,
    "SpdKarcherMeanWeighted": _SPD,
    "SpdLogMap": _SPD,
    "SpdLogMapBackward": _SPD,
    "SpdExpMap": _SPD,
    "SpdExpMapBackward": _SPD,
    "SpdParallelTransport": _SPD,
    "SpdParallelTransportBackward": _SPD,
    "SpdMatrixFnBatch": _SPD,
    "SpdMatrixFnBatchBackward": _SPD,
    # user kernels
    "Custom": "a user kernel for one backend; `jax.pure_callback` and primitives with no rule "
              "are HostPrimitive today, and a kernel-registration API would produce these",
    "CustomFn": "as Custom, for a kernel given as a function",
}
