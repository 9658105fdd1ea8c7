"""The IR side of rlx_jax.nn: which OpKind each primitive becomes, and the reference semantics
of every high-level and backward kind (docs/high-level-kinds.md), as jnp functions of a node's
operands and attributes.

`PRIM_KINDS[primitive name] = (OpKind, attrs(params, operands) -> dict)`.
`KIND_REFS[OpKind] = ref(*operands, **attrs)`: used for shape inference of these kinds, by the
decomposition tests, and by any backend that wants a jnp fallback.
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax._src.lax import windowed_reductions as _wr

from ..ir.ops import OpKind as K
from . import activations as A
from . import attn, losses, norms


def _same(params, operands):
    return dict(params)


def _softmax_attrs(params, operands):
    return {"axis": params["axis"] % operands[0].ndim}


PRIM_KINDS = {
    "rlx_activation": (K.Activation, _same),
    "rlx_relu_backward": (K.ReluBackward, _same),
    "rlx_activation_backward": (K.ActivationBackward, _same),
    "rlx_softmax": (K.Softmax, _softmax_attrs),
    "rlx_layer_norm": (K.LayerNorm, _same),
    "rlx_layer_norm_backward_input": (K.LayerNormBackwardInput, _same),
    "rlx_layer_norm_backward_gamma": (K.LayerNormBackwardGamma, _same),
    "rlx_rms_norm": (K.RmsNorm, _same),
    "rlx_rms_norm_backward_input": (K.RmsNormBackwardInput, _same),
    "rlx_rms_norm_backward_gamma": (K.RmsNormBackwardGamma, _same),
    "rlx_rms_norm_backward_beta": (K.RmsNormBackwardBeta, _same),
    "rlx_group_norm": (K.GroupNorm, _same),
    "rlx_group_norm_backward_input": (K.GroupNormBackwardInput, _same),
    "rlx_group_norm_backward_gamma": (K.GroupNormBackwardGamma, _same),
    "rlx_group_norm_backward_beta": (K.GroupNormBackwardBeta, _same),
    "rlx_attention": (K.Attention, _same),
    "rlx_attention_backward": (K.AttentionBackward, _same),
    "rlx_rope": (K.Rope, _same),
    "rlx_rope_backward": (K.RopeBackward, _same),
    "rlx_softmax_cross_entropy_with_logits": (K.SoftmaxCrossEntropyWithLogits, _same),
    "rlx_softmax_cross_entropy_backward": (K.SoftmaxCrossEntropyBackward, _same),
    "rlx_ada_layer_norm": (K.AdaLayerNorm, _same),
    "rlx_ada_layer_norm_backward": (K.AdaLayerNormBackward, _same),
    "rlx_gated_residual": (K.GatedResidual, _same),
    "rlx_gated_residual_backward": (K.GatedResidualBackward, _same),
}


# ---- kinds recognised from JAX's own autodiff output ----
def max_pool2d_backward_ref(x, dy, *, window_dimensions, window_strides, padding):
    return _wr._select_and_scatter_add(dy, x, lax.ge_p, window_dimensions, window_strides,
                                       padding)


def _conv(attrs):
    keys = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "dimension_numbers",
            "feature_group_count", "batch_group_count", "preferred_element_type")
    a = {k: attrs[k] for k in keys}
    a["dimension_numbers"] = lax.ConvDimensionNumbers(*a["dimension_numbers"])
    return lambda x, w: lax.conv_general_dilated(x, w, **a)


def conv2d_backward_input_ref(dy, w, *, input_shape, **attrs):
    x = jax.ShapeDtypeStruct(tuple(input_shape), dy.dtype)
    return jax.linear_transpose(lambda x: _conv(attrs)(x, w), x)(dy)[0]


def conv2d_backward_weight_ref(x, dy, *, weight_shape, **attrs):
    w = jax.ShapeDtypeStruct(tuple(weight_shape), dy.dtype)
    return jax.linear_transpose(lambda w: _conv(attrs)(x, w), w)(dy)[0]


def gather_dimension_numbers(index_rank, slice_rank):
    """Scatter dimension numbers of the embedding-gather transpose: indices[..., 1] pick rows
    of axis 0 of a table whose other `slice_rank` axes are whole slices."""
    return lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(index_rank, index_rank + slice_rank)),
        inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))


def gather_backward_ref(dy, indices, *, axis, num, mode):
    """Scatter-add of dy's slices into zeros[num, ...] at integer `indices` (axis 0 of the
    table); `mode` is the scatter mode of the transposed gather (out-of-bounds handling)."""
    assert axis == 0, axis
    slice_shape = dy.shape[indices.ndim:]
    table = jnp.zeros((num,) + slice_shape, dy.dtype)
    dn = gather_dimension_numbers(indices.ndim, len(slice_shape))
    return lax.scatter_add(table, indices[..., None], dy, dn, mode=mode)


def cumsum_backward_ref(dy, *, axis, reverse):
    return lax.cumsum(dy, axis=axis, reverse=not reverse)


KIND_REFS = {
    K.ReluBackward: A.relu_backward_ref,
    K.ActivationBackward: A.activation_backward_ref,
    K.Softmax: A.softmax_ref,
    K.LayerNorm: norms.layer_norm_ref,
    K.LayerNormBackwardInput: norms.ln_backward_input_ref,
    K.LayerNormBackwardGamma: norms.ln_backward_gamma_ref,
    K.RmsNorm: norms.rms_norm_ref,
    K.RmsNormBackwardInput: norms.rms_backward_input_ref,
    K.RmsNormBackwardGamma: norms.rms_backward_gamma_ref,
    K.RmsNormBackwardBeta: norms.rms_backward_beta_ref,
    K.GroupNorm: norms.group_norm_ref,
    K.GroupNormBackwardInput: norms.gn_backward_input_ref,
    K.GroupNormBackwardGamma: norms.gn_backward_gamma_ref,
    K.GroupNormBackwardBeta: norms.gn_backward_beta_ref,
    K.Attention: attn.attention_ref,
    K.AttentionBackward: attn.attention_backward_ref,
    K.Rope: attn.rope_ref,
    K.RopeBackward: attn.rope_backward_ref,
    K.SoftmaxCrossEntropyWithLogits: losses.sce_ref,
    K.SoftmaxCrossEntropyBackward: losses.sce_backward_ref,
    K.AdaLayerNorm: norms.ada_layer_norm_ref,
    K.AdaLayerNormBackward: norms.ada_backward_ref,
    K.GatedResidual: norms.gated_residual_ref,
    K.GatedResidualBackward: norms.gated_backward_ref,
    K.MaxPool2dBackward: max_pool2d_backward_ref,
    K.Conv2dBackwardInput: conv2d_backward_input_ref,
    K.Conv2dBackwardWeight: conv2d_backward_weight_ref,
    K.GatherBackward: gather_backward_ref,
    K.CumsumBackward: cumsum_backward_ref,
}


def evaluate(node, *operands):
    """Runs the reference semantics of `node` (a high-level or backward kind) on arrays."""
    out = KIND_REFS[node.kind](*operands, **node.attrs)
    return tuple(out) if isinstance(out, (tuple, list)) else out
