"""Shared cases for the rlx_jax.nn tests: one record (tests/cases.py) per high-level/backward
kind with operand makers and attributes (the attributes of docs/high-level-kinds.md)."""
import numpy as np

from rlx_jax.ir.graph import Builder
from rlx_jax.ir.ops import OpKind as K

from .cases import Case


def kind_case(name, kind, operands, attrs, atol=1e-5):
    """The case of one `kind` node: `operands` (rng -> array, one per operand), `attrs`."""
    return Case(name, kind=kind, operands=operands, attrs=attrs, atol=atol)


def f(*shape, lo=-2.0, hi=2.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def ints(hi, *shape):
    return lambda r: r.randint(0, hi, shape).astype(np.int32)


def byte(dtype, *shape):
    """A weight stored in bytes: every value of `dtype` (int8 / uint8)."""
    info = np.iinfo(dtype)
    return lambda r: r.randint(info.min, info.max + 1, shape).astype(dtype)


def pos(*shape):
    return f(*shape, lo=0.5, hi=1.5)


def boolean(*shape):
    return lambda r: r.rand(*shape) > 0.3


X, D = (2, 3, 8), 8
ATT = dict(scale=0.5, causal=False, layout="BHSD", mask_kind="none")
Q, KV, V = (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3)
CONV = dict(window_strides=(2, 2), padding=((1, 1), (1, 1)), lhs_dilation=(1, 1),
            rhs_dilation=(1, 1), dimension_numbers=((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)),
            feature_group_count=1, batch_group_count=1, preferred_element_type=None)
ROPE = dict(traditional=False, seq_axis=-2)
ROPE_FORMS = [           # (name suffix, operands, attributes): nn/rotary.py's variants
    ("_full", (f(2, 3, 5, 8), f(5, 8), f(5, 8)), {}),
    ("_bshd", (f(2, 5, 3, 8), f(5, 4), f(5, 4)), dict(seq_axis=-3)),
    ("_traditional", (f(2, 3, 5, 8), f(5, 4), f(5, 4)), dict(traditional=True)),
    ("_freqs", (f(2, 3, 5, 8), f(4, lo=0.01, hi=1.0)), {}),
    ("_freqs_bshd_traditional", (f(2, 5, 3, 8), f(4, lo=0.01, hi=1.0)),
     dict(traditional=True, seq_axis=-3)),
    ("_freqs_2d", (f(5, 8), f(4, lo=0.01, hi=1.0)), {}),
]
POOL = dict(window_dimensions=(1, 2, 2, 1), window_strides=(1, 2, 2, 1),
            padding=((0, 0),) * 4)

KIND_CASES = [
    kind_case("softmax", K.Softmax, (f(*X),), dict(axis=2)),
    kind_case("softmax_axis1", K.Softmax, (f(*X),), dict(axis=1)),
    kind_case("log_softmax", K.LogSoftmax, (f(*X, lo=-30, hi=30),), dict(axis=2)),
    kind_case("log_softmax_axis0", K.LogSoftmax, (f(*X),), dict(axis=0)),
    kind_case("relu_bwd", K.ReluBackward, (f(*X), f(*X)), {}),
    *[kind_case(f"act_bwd_{fn}", K.ActivationBackward, (f(*X), f(*X)), dict(fn=fn))
      for fn in ("gelu", "gelu_tanh", "silu", "sigmoid", "tanh")],
    kind_case("layer_norm", K.LayerNorm, (f(*X), f(D), f(D)), dict(eps=1e-5)),
    kind_case("ln_bwd_input", K.LayerNormBackwardInput, (f(*X), f(D), f(*X)), dict(eps=1e-5)),
    kind_case("ln_bwd_gamma", K.LayerNormBackwardGamma, (f(*X), f(*X)), dict(eps=1e-5)),
    kind_case("rms_norm", K.RmsNorm, (f(*X), f(D)), dict(eps=1e-6, has_beta=False)),
    kind_case("rms_norm_beta", K.RmsNorm, (f(*X), f(D), f(D)), dict(eps=1e-6, has_beta=True)),
    kind_case("rms_bwd_input", K.RmsNormBackwardInput, (f(*X), f(D), f(*X)), dict(eps=1e-6)),
    kind_case("rms_bwd_gamma", K.RmsNormBackwardGamma, (f(*X), f(*X)), dict(eps=1e-6)),
    kind_case("rms_bwd_beta", K.RmsNormBackwardBeta, (f(*X),), {}),
    kind_case("group_norm", K.GroupNorm, (f(2, 3, 3, 8), f(D), f(D)), dict(num_groups=4, eps=1e-5)),
    kind_case("gn_bwd_input", K.GroupNormBackwardInput, (f(2, 3, 3, 8), f(D), f(2, 3, 3, 8)),
             dict(num_groups=4, eps=1e-5)),
    kind_case("gn_bwd_gamma", K.GroupNormBackwardGamma, (f(2, 3, 3, 8), f(2, 3, 3, 8)),
             dict(num_groups=4, eps=1e-5)),
    kind_case("gn_bwd_beta", K.GroupNormBackwardBeta, (f(2, 3, 3, 8),), {}),
    kind_case("attention", K.Attention, (f(*Q), f(*KV), f(*V)), ATT),
    kind_case("attention_causal_bshd", K.Attention, (f(2, 5, 2, 4), f(2, 5, 2, 4), f(2, 5, 2, 3)),
             dict(ATT, causal=True, layout="BSHD")),
    kind_case("attention_additive", K.Attention, (f(*Q), f(*KV), f(*V), f(2, 1, 5, 6)),
             dict(ATT, mask_kind="additive")),
    kind_case("attention_bool", K.Attention, (f(*Q), f(*KV), f(*V), boolean(5, 6)),
             dict(ATT, mask_kind="bool", causal=True)),
    kind_case("attention_bwd", K.AttentionBackward, (f(*Q), f(*KV), f(*V), f(2, 2, 5, 3)), ATT),
    kind_case("attention_bwd_mask_bshd", K.AttentionBackward,
             (f(2, 5, 2, 4), f(2, 6, 2, 4), f(2, 6, 2, 3), boolean(2, 1, 5, 6), f(2, 5, 2, 3)),
             dict(ATT, mask_kind="bool", causal=True, layout="BSHD")),
    kind_case("rope", K.Rope, (f(2, 3, 5, 8), f(5, 4), f(5, 4)), ROPE),
    kind_case("rope_bwd", K.RopeBackward, (f(2, 3, 5, 8), f(5, 4), f(5, 4)), ROPE),
    *[kind_case(f"rope{sfx}", kind, ops, dict(ROPE, **at)) for sfx, ops, at in ROPE_FORMS
      for kind, sfx in ((K.Rope, sfx), (K.RopeBackward, sfx + "_bwd"))],
    kind_case("sce", K.SoftmaxCrossEntropyWithLogits, (f(6, 10), ints(10, 6)), {}),
    kind_case("sce_bwd", K.SoftmaxCrossEntropyBackward, (f(6, 10), ints(10, 6), f(6)), {}),
    kind_case("sce_dense", K.SoftmaxCrossEntropy, (f(2, 3, 10, lo=-30, hi=30), pos(2, 3, 10)),
              {}),
    kind_case("sce_dense_bwd", K.SoftmaxCrossEntropyDenseBackward,
              (f(2, 3, 10, lo=-30, hi=30), pos(2, 3, 10), f(2, 3)), {}),
    kind_case("ada_layer_norm", K.AdaLayerNorm, (f(*X), f(2, D), f(2, D)), dict(eps=1e-6)),
    kind_case("ada_bwd", K.AdaLayerNormBackward, (f(*X), f(2, D), f(*X)), dict(eps=1e-6)),
    kind_case("gated_residual", K.GatedResidual, (f(*X), f(2, D), f(*X)), {}),
    kind_case("lora_matmul", K.LoraMatMul, (f(*X), f(D, 6), f(D, 3), f(3, 6)), {"scale": 0.5}),
    kind_case("lstm", K.Lstm, (f(4, 2, 3), f(2, D), f(2, D), f(4 * D, 3, lo=-0.5, hi=0.5),
                               f(4 * D, D, lo=-0.5, hi=0.5), f(4 * D)), {}),
    kind_case("gru", K.Gru, (f(4, 2, 3), f(2, D), f(3 * D, 3, lo=-0.5, hi=0.5),
                             f(3 * D, D, lo=-0.5, hi=0.5), f(3 * D), f(D)), {}),
    kind_case("rnn", K.Rnn, (f(4, 2, 3), f(2, D), f(D, 3, lo=-0.5, hi=0.5),
                             f(D, D, lo=-0.5, hi=0.5), f(D)), {}),
    kind_case("dequant_int8", K.DequantMatMul,
              (f(2, 3, 64), byte(np.int8, 64, 6), f(6, lo=.01, hi=.05)),
              {"packing": "int8_per_channel", "bits": 8, "group_size": 64, "transpose": False},
              atol=1e-4),
    kind_case("dequant_int4", K.DequantMatMul, (f(2, 3, 64), byte(np.uint8, 32, 6),
                                                f(2, 6, lo=.01, hi=.1), f(2, 6, lo=0, hi=15)),
              {"packing": "int4_u8", "bits": 4, "group_size": 32, "transpose": False},
              atol=1e-4),
    kind_case("dequant_int4_transposed", K.DequantMatMul,
              (f(2, 3, 6), byte(np.uint8, 32, 6), f(2, 6, lo=.01, hi=.1), f(2, 6, lo=0, hi=15)),
              {"packing": "int4_u8", "bits": 4, "group_size": 32, "transpose": True}, atol=1e-4),
    kind_case("gated_bwd", K.GatedResidualBackward, (f(2, D), f(*X), f(*X)), {}),
    kind_case("maxpool_bwd_tiling", K.MaxPool2dBackward, (f(2, 8, 8, 3), f(2, 4, 4, 3)), POOL),
    kind_case("maxpool_bwd_overlap", K.MaxPool2dBackward, (f(2, 7, 7, 3), f(2, 3, 3, 3)),
             dict(POOL, window_dimensions=(1, 3, 3, 1))),
    kind_case("conv_bwd_input", K.Conv2dBackwardInput, (f(2, 4, 4, 4), f(3, 3, 3, 4)),
             dict(CONV, input_shape=(2, 8, 8, 3))),
    kind_case("conv_bwd_weight", K.Conv2dBackwardWeight, (f(2, 8, 8, 3), f(2, 4, 4, 4)),
             dict(CONV, weight_shape=(3, 3, 3, 4))),
    kind_case("gather_bwd", K.GatherBackward, (f(2, 3, 4), ints(10, 2, 3)),
             dict(axis=0, num=10, mode="promise_in_bounds")),
    kind_case("cumsum_bwd", K.CumsumBackward, (f(5, 4),), dict(axis=0, reverse=False)),
]


def single_node_graph(kind, operands, attrs):
    """A graph of one `kind` node over fresh inputs of the given (shape, dtype)s."""
    b = Builder()
    ins = [b.input(s, d) for s, d in operands]
    b.add(kind, ins, attrs)
    node = b.graph.nodes[-1]
    b.graph.outputs = list(node.outputs)
    return b.graph, node
