"""MIL reference executor: exact NumPy versions of the MIL ops the native nn kernels use that
coremltools cannot evaluate (`one_hot`, `conv_transpose`), registered in
executor_ops.OVERRIDES."""
import numpy as np

from ....errors import LoweringError
from .ops import override
from .strict import rng


@override("one_hot")
def _one_hot(indices, one_hot_vector_size, axis=-1, on_value=1.0, off_value=0.0, **_):
    c = int(one_hot_vector_size)
    idx = np.asarray(indices)
    # the spec says nothing of an out-of-range index: it sets a random position here
    # (executor/strict.py); the lowerings pass indices in range
    outside = (idx < 0) | (idx >= c)
    idx = np.where(outside, rng(idx).integers(0, c, size=idx.shape), idx)
    hit = idx[..., None] == np.arange(c)
    on, off = np.asarray(on_value), np.asarray(off_value)
    out = np.where(hit, on, off).astype(np.result_type(on, off))
    axis = int(axis)
    return np.moveaxis(out, -1, axis if axis >= 0 else out.ndim + axis)


@override("conv_transpose")
def _conv_transpose(x, weight, bias=None, pad=None, output_shape=None, pad_type="valid",
                    strides=None, dilations=None, groups=1, **_):
    """The adjoint of `conv` (weight [Cin, Cout/groups, *k]): every input position adds its
    kernel-weighted contribution into a full-size output, then `pad` is cut from the edges."""
    nsp = x.ndim - 2
    kernel = weight.shape[2:]
    strides = [int(s) for s in (strides if strides is not None else [1] * nsp)]
    dilations = [int(d) for d in (dilations if dilations is not None else [1] * nsp)]
    if str(pad_type) not in ("valid", "custom"):
        raise LoweringError(f"MIL executor: conv_transpose pad_type {pad_type!r} is not "
                            f"implemented")
    pads = [int(p) for p in pad] if str(pad_type) == "custom" and pad is not None \
        else [0] * (2 * nsp)
    g, n, cin = int(groups), x.shape[0], x.shape[1]
    cout_g = weight.shape[1]
    spatial = x.shape[2:]
    full = [(i - 1) * s + d * (k - 1) + 1 for i, s, d, k in zip(spatial, strides, dilations,
                                                                 kernel)]
    y = np.zeros([n, g, cout_g] + full)
    xg = x.astype(np.float64).reshape((n, g, cin // g) + spatial)
    wg = weight.astype(np.float64).reshape((g, cin // g, cout_g) + tuple(kernel))
    for k in np.ndindex(*kernel):
        contrib = np.einsum("ngc...,gco->ngo...", xg, wg[(Ellipsis,) + k])
        where = tuple(slice(o * d, o * d + (i - 1) * s + 1, s)
                      for o, d, i, s in zip(k, dilations, spatial, strides))
        y[(slice(None),) * 3 + where] += contrib
    y = y.reshape([n, g * cout_g] + full)
    crop = tuple(slice(pads[2 * i], full[i] - pads[2 * i + 1]) for i in range(nsp))
    y = y[(slice(None), slice(None)) + crop]
    if output_shape is not None and tuple(int(v) for v in output_shape) != y.shape:
        raise LoweringError(f"MIL executor: conv_transpose output_shape {tuple(output_shape)} "
                            f"differs from the computed {y.shape}")
    if bias is not None:
        y = y + np.asarray(bias).reshape([1, -1] + [1] * nsp)
    return y.astype(x.dtype)

