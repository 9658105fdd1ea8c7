"""How a JAX program reaches each OpKind: the JAX primitives the frontend translates to it, and
what else produces it (an `rlx_jax.nn` primitive, a recognizer, a decomposition, a backend's
own rewrite). `docs/op-coverage.md` shows it per kind (`python -m rlx_jax.coverage --write`);
tests/test_coverage.py checks that every kind has an entry and every primitive named has a
frontend rule. The kinds no JAX program reaches are in ir/reserved.py.

REACHED: {OpKind: (JAX primitive names, space-separated; what else produces it)}.
"""
from .ops import OpKind as K

_NN = "`rlx_jax.nn.{}`"
_PATTERN = "recognized from JAX's own formula (passes/pattern_table.py)"
_GRAD = "`jax.grad` of {}, recognized (passes/recognize.py)"
_NN_GRAD = "the backward rule of `rlx_jax.nn.{}` under `jax.grad`"

REACHED = {
    K.Input: ("", "every array argument of the jitted function"),
    K.Constant: ("iota_2x32_shape platform_index", "closed-over arrays and literals"),
    K.Activation: ("abs acos acosh asin asinh atan atanh cbrt ceil cos cosh digamma erf erf_inv "
                   "erfc exp exp2 expm1 floor integer_pow is_finite lgamma log log1p logistic "
                   "neg not population_count round rsqrt sign sin sinh sqrt square tan tanh",
                   "`jax.nn.relu` / `gelu` / `silu` recognized as one activation"),
    K.Cast: ("convert_element_type", ""),
    K.Binary: ("add add_any and atan2 div max min mul nextafter or pow rem shift_left "
               "shift_right_arithmetic shift_right_logical sub xor mulhi clamp", ""),
    K.Compare: ("eq ne lt le gt ge eq_to lt_to le_to", ""),
    K.Where: ("select_n", ""),
    K.MatMul: ("", "Core ML's rewrite of FFTs as DFT matmuls (backends/coreml/passes/complex_dft.py)"),
    K.DotGeneral: ("dot_general", "`jnp.matmul`, `jnp.einsum`, `@`"),
    K.Reduce: ("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor "
               "reduce", ""),
    K.ArgMax: ("argmax", ""),
    K.ArgMin: ("argmin", ""),
    K.Cumsum: ("cumsum", ""),
    K.CumProd: ("cumprod", ""),
    K.CumMax: ("cummax", ""),
    K.Sort: ("sort", "`jnp.sort`, `jnp.argsort`"),
    K.TopK: ("top_k", ""),
    K.Reshape: ("reshape squeeze", ""),
    K.Transpose: ("transpose", ""),
    K.Narrow: ("", "decompositions (GLU halves) and MLX's all-reduce combining"),
    K.Concat: ("concatenate", ""),
    K.Expand: ("broadcast_in_dim", ""),
    K.Reverse: ("rev", ""),
    K.Gather: ("gather", "`x[idx]`, `jnp.take`"),
    K.ScatterAdd: ("scatter-add", "`x.at[idx].add(v)`"),
    K.Conv: ("conv_general_dilated", "flax `nn.Conv`"),
    K.Pool: ("reduce_window_sum reduce_window_max reduce_window_min", "flax `nn.max_pool` / "
             "`avg_pool`"),
    K.Softmax: ("rlx_softmax", _NN.format("softmax") + "; `jax.nn.softmax` " + _PATTERN),
    K.LogSoftmax: ("rlx_log_softmax", _NN.format("log_softmax") + "; `jax.nn.log_softmax` "
                   + _PATTERN),
    K.LayerNorm: ("rlx_layer_norm", _NN.format("layer_norm") + "; flax `nn.LayerNorm` "
                  + _PATTERN),
    K.RmsNorm: ("rlx_rms_norm", _NN.format("rms_norm") + "; flax `nn.RMSNorm` " + _PATTERN),
    K.GroupNorm: ("rlx_group_norm", _NN.format("group_norm") + "; flax `nn.GroupNorm` "
                  + _PATTERN),
    K.Attention: ("rlx_attention", _NN.format("attention") + "; "
                  "`jax.nn.dot_product_attention` and flax attention " + _PATTERN),
    K.Rope: ("rlx_rope", _NN.format("rope") + "; `x * cos + rotate_half(x) * sin`, its "
             "half-width and interleaved (GPT-J) forms, recognized (passes/pattern_rope.py)"),
    K.AdaLayerNorm: ("rlx_ada_layer_norm", _NN.format("ada_layer_norm")),
    K.GatedResidual: ("rlx_gated_residual", _NN.format("gated_residual")),
    K.LoraMatMul: ("", "a LoRA layer, `x @ W + (x @ A @ B) * scale` (or without the scale; "
                       "with a bias, flax `nn.Dense(x) + ...`), recognized "
                       "(passes/pattern_refs.py)"),
    K.DequantMatMul: ("", "a quantized linear layer, `x @ (q.astype(x.dtype) * scale)` (int8 "
                          "per output channel) or int4 nibbles unpacked, `(w - zero) * scale` per "
                          "group of rows, recognized (passes/pattern_quant.py)"),
    K.SoftmaxCrossEntropyWithLogits: (
        "rlx_softmax_cross_entropy_with_logits",
        _NN.format("softmax_cross_entropy_with_logits") + "; "
        "`optax.softmax_cross_entropy_with_integer_labels` " + _PATTERN),
    K.SoftmaxCrossEntropy: ("", "`optax.softmax_cross_entropy` with probability labels (or "
                                "`-jnp.sum(labels * jax.nn.log_softmax(logits), -1)`), "
                                "recognized (passes/pattern_xent.py)"),
    K.ReluBackward: ("rlx_relu_backward", _NN_GRAD.format("relu")),
    K.ActivationBackward: ("rlx_activation_backward", _NN_GRAD.format("activation") + "; "
                           "`jax.grad` of `jax.nn.gelu` / `silu` " + _PATTERN),
    K.LayerNormBackwardInput: ("rlx_layer_norm_backward_input",
                               _NN_GRAD.format("layer_norm") + "; " + _PATTERN),
    K.LayerNormBackwardGamma: ("rlx_layer_norm_backward_gamma",
                               _NN_GRAD.format("layer_norm") + "; " + _PATTERN),
    K.RmsNormBackwardInput: ("rlx_rms_norm_backward_input",
                             _NN_GRAD.format("rms_norm") + "; " + _PATTERN),
    K.RmsNormBackwardGamma: ("rlx_rms_norm_backward_gamma",
                             _NN_GRAD.format("rms_norm") + "; " + _PATTERN),
    K.RmsNormBackwardBeta: ("rlx_rms_norm_backward_beta", _NN_GRAD.format("rms_norm")),
    K.GroupNormBackwardInput: ("rlx_group_norm_backward_input",
                               _NN_GRAD.format("group_norm") + "; " + _PATTERN),
    K.GroupNormBackwardGamma: ("rlx_group_norm_backward_gamma",
                               _NN_GRAD.format("group_norm") + "; " + _PATTERN),
    K.GroupNormBackwardBeta: ("rlx_group_norm_backward_beta", _NN_GRAD.format("group_norm")),
    K.AttentionBackward: ("rlx_attention_backward", _NN_GRAD.format("attention") + "; "
                          + _PATTERN),
    K.RopeBackward: ("rlx_rope_backward", _NN_GRAD.format("rope") + "; `jax.grad` of the "
                     "recognized RoPE formulas"),
    K.SoftmaxCrossEntropyBackward: (
        "rlx_softmax_cross_entropy_backward",
        _NN_GRAD.format("softmax_cross_entropy_with_logits") + "; " + _PATTERN),
    K.SoftmaxCrossEntropyDenseBackward: ("", "`jax.grad` of `optax.softmax_cross_entropy` "
                                             "w.r.t. the logits, recognized "
                                             "(passes/pattern_xent.py)"),
    K.AdaLayerNormBackward: ("rlx_ada_layer_norm_backward", _NN_GRAD.format("ada_layer_norm")),
    K.GatedResidualBackward: ("rlx_gated_residual_backward",
                              _NN_GRAD.format("gated_residual")),
    K.MaxPool2dBackward: ("", _GRAD.format("a 2-D max pool (select_and_scatter_add)")),
    K.Conv2dBackwardInput: ("", _GRAD.format("a 2-D convolution, for its input")),
    K.Conv2dBackwardWeight: ("", _GRAD.format("a 2-D convolution, for its kernel")),
    K.CumsumBackward: ("", _GRAD.format("`jnp.cumsum` (a reversed cumsum)")),
    K.GatherBackward: ("", _GRAD.format("a gather (its scatter-add transpose)")),
    K.If: ("cond", "`lax.cond`, `lax.switch`"),
    K.While: ("while", "`lax.while_loop`, `lax.fori_loop` with traced bounds"),
    K.Scan: ("scan", "`lax.scan`, `lax.fori_loop` with static bounds, flax `nn.scan`"),
    K.Lstm: ("", "flax `nn.RNN(nn.LSTMCell(...))`, or `nn.scan` / `lax.scan` over the cell, "
                 "recognized (passes/recognize_rnn.py)"),
    K.Gru: ("", "flax `nn.RNN(nn.GRUCell(...))`, or `nn.scan` / `lax.scan` over the cell, "
                "recognized (passes/recognize_rnn.py)"),
    K.Rnn: ("", "flax `nn.RNN(nn.SimpleCell(...))`, or `nn.scan` / `lax.scan` over the cell, "
                "recognized (passes/recognize_rnn.py)"),
    K.Cholesky: ("cholesky", ""),
    K.TriangularSolve: ("triangular_solve", ""),
    K.Svd: ("svd", ""),
    K.Qr: ("qr", ""),
    K.Eigh: ("eigh", ""),
    K.Fft: ("fft", "`jnp.fft.*`"),
    K.Conjugate: ("conj", ""),
    K.CumMin: ("cummin", ""),
    K.CumLogSumExp: ("cumlogsumexp", ""),
    K.Iota: ("iota", "`jnp.arange`"),
    K.Pad: ("pad", ""),
    K.Slice: ("slice split", ""),
    K.DynamicSlice: ("dynamic_slice", ""),
    K.DynamicUpdateSlice: ("dynamic_update_slice", ""),
    K.Bitcast: ("bitcast_convert_type", ""),
    K.ReducePrecision: ("reduce_precision", ""),
    K.Scatter: ("scatter scatter-mul scatter-min scatter-max", "`x.at[idx].set(v)`"),
    K.SelectAndScatterAdd: ("select_and_scatter_add", ""),
    K.SelectAndGatherAdd: ("select_and_gather_add", ""),
    K.RandomSeed: ("random_seed", "`jax.random.key`"),
    K.RandomWrap: ("random_wrap", ""),
    K.RandomUnwrap: ("random_unwrap", ""),
    K.RandomBits: ("random_bits", "every `jax.random` sampler"),
    K.RandomSplit: ("random_split", ""),
    K.RandomFoldIn: ("random_fold_in", ""),
    K.RandomGamma: ("random_gamma", ""),
    K.ThreeFry2x32: ("threefry2x32", ""),
    K.Lu: ("lu", "`jnp.linalg.solve`, `det`, `inv`"),
    K.LuPivotsToPermutation: ("lu_pivots_to_permutation", ""),
    K.Eig: ("eig", ""),
    K.Complex: ("complex", ""),
    K.Real: ("real", ""),
    K.Imag: ("imag", ""),
    K.AllReduce: ("psum pmax pmin", "`rlx_jax.jit(axis_name=...)`"),
    K.AllGather: ("all_gather", ""),
    K.ReduceScatter: ("reduce_scatter", ""),
    K.AxisIndex: ("axis_index", ""),
    K.Ppermute: ("ppermute", ""),
    K.AdamUpdate: ("", "optax's `adam` / `adamw` update, recognized (passes/recognize_optim.py)"),
    K.LionUpdate: ("", "optax's `lion` update, recognized (passes/recognize_optim.py)"),
    K.SgdMomentumUpdate: ("", "optax's `sgd` update with momentum (nesterov too), recognized "
                              "(passes/recognize_sgd.py)"),
    K.DimSize: ("dim_as_value", "a symbolic dimension's size used as data (`jnp.mean` over a "
                "symbolic axis) with `polymorphic_shapes`; instantiated as a Constant before "
                "any backend sees it"),
    K.HostPrimitive: ("", "any JAX primitive with no rule and no effects, with "
                      "`fallback=\"host\"`"),
}
