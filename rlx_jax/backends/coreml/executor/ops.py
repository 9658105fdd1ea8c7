"""MIL reference executor: OVERRIDES (MIL op type -> NumPy function), the exact NumPy semantics
of the MIL ops coremltools does not evaluate (or evaluates wrongly). strict.py adds the
ops whose spec leaves a choice open (ties, NaN through max/min, rounding of halves, signs of
mod, casts out of range, ...), evaluated with the least convenient reading; nn.py those of the
native nn kernels' ops; reference.py runs everything else through coremltools' own value
inference. docs/mil-semantics.md lists every MIL behaviour a lowering relies on."""
import itertools

import numpy as np

from ....errors import LoweringError
from ....tables import rule_table

OVERRIDES, override = rule_table("MIL executor overrides")


@override("gather_nd")
def _gather_nd(x, indices, batch_dims=0, **_):
    if int(batch_dims) != 0:
        raise LoweringError("MIL executor: gather_nd with batch_dims is not implemented")
    k = indices.shape[-1]
    return x[tuple(indices[..., i] for i in range(k))]


@override("silu")
def _silu(x, **_):
    return x / (1 + np.exp(-x))


def _windows(xp, kernel, strides, dilations, out):
    """Yields (kernel offset, strided window view [N, C, *out]) over a padded input."""
    for k in itertools.product(*[range(n) for n in kernel]):
        sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                   for o, d, n, s in zip(k, dilations, out, strides))
        yield k, xp[(slice(None), slice(None)) + sl]


def _pads(pad_type, pad, nsp, spatial, kernel, strides, dilations):
    pad_type = str(pad_type)
    if pad_type == "custom":
        p = [int(v) for v in pad]
        return [(p[2 * i], p[2 * i + 1]) for i in range(nsp)]
    if pad_type == "valid":
        return [(0, 0)] * nsp
    if pad_type == "same":
        res = []
        for n, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
            res.append((total // 2, total - total // 2))
        return res
    raise LoweringError(f"MIL executor: pad_type {pad_type!r} is not implemented")


def _out_size(shape, pads, kernel, strides, dilations):
    return [(n + lo + hi - d * (k - 1) - 1) // s + 1
            for n, (lo, hi), k, s, d in zip(shape, pads, kernel, strides, dilations)]


@override("conv")
def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None,
          groups=1, **_):
    nsp = x.ndim - 2
    kernel = weight.shape[2:]
    strides = [int(s) for s in (strides if strides is not None else [1] * nsp)]
    dilations = [int(d) for d in (dilations if dilations is not None else [1] * nsp)]
    pads = _pads(pad_type, pad, nsp, x.shape[2:], kernel, strides, dilations)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + pads)
    out = _out_size(x.shape[2:], pads, kernel, strides, dilations)
    g, n, cout = int(groups), x.shape[0], weight.shape[0]
    w = weight.astype(np.float64).reshape((g, cout // g) + weight.shape[1:])
    y = np.zeros([n, g, cout // g] + out)
    for k, win in _windows(xp, kernel, strides, dilations, out):
        patch = win.reshape([n, g, -1] + out)
        y += np.einsum("ngc...,goc->ngo...", patch, w[(Ellipsis,) + k])
    y = y.reshape([n, cout] + out)
    if bias is not None:
        y += bias.reshape([1, cout] + [1] * nsp)
    return y.astype(x.dtype)


@override("max_pool")
def _max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False, **_):
    """The spec gives max_pool no pad value and says nothing of NaN: padding counts as 0 (as
    avg_pool's padding, "0s"), and a NaN is dropped from its window (all NaN: NaN), the least
    convenient readings (executor/strict.py)."""
    if bool(ceil_mode):
        raise LoweringError("MIL executor: max_pool with ceil_mode is not implemented")
    nsp = x.ndim - 2
    kernel = [int(k) for k in kernel_sizes]
    strides = [int(s) for s in (strides if strides is not None else [1] * nsp)]
    ones = [1] * nsp
    pads = _pads(pad_type, pad, nsp, x.shape[2:], kernel, strides, ones)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads, constant_values=0)
    out = _out_size(x.shape[2:], pads, kernel, strides, ones)
    acc = None
    for _, win in _windows(xp, kernel, strides, ones, out):
        acc = win if acc is None else np.fmax(acc, win)
    return acc


@override("select")
def _select(cond, a, b, **_):
    # coremltools' value_inference breaks when scalar branches broadcast against cond
    return np.where(cond, a, b)



@override("constexpr_blockwise_shift_scale")
def _blockwise_shift_scale(data, scale, offset=None, **_):
    """iOS18 compression: out[i..] = scale[i0..] · (data[i..] − offset[i0..]), i0 = i // block,
    block = data.shape / scale.shape per axis (all of one rank, scale and offset of one shape,
    each block size an integer), computed in the scale's dtype (the output's)."""
    data, scale = np.asarray(data), np.asarray(scale)
    shapes = [np.shape(v) for v in (data, scale) + (() if offset is None else (offset,))]
    if len({len(s) for s in shapes}) != 1 or any(
            d % s for d, s in zip(data.shape, scale.shape)) or shapes[1:] != shapes[-1:] * (
            len(shapes) - 1):
        raise LoweringError(f"MIL executor: constexpr_blockwise_shift_scale with data, scale "
                            f"(, offset) of shapes {shapes}: not blocks of the data")

    def spread(v):
        for axis, (d, s) in enumerate(zip(data.shape, v.shape)):
            v = np.repeat(v, d // s, axis)
        return v.astype(scale.dtype)
    out = data.astype(scale.dtype)
    if offset is not None:
        out = out - spread(np.asarray(offset))
    return spread(scale) * out


@override("concat")
def _concat(values, axis, interleave=False, **_):
    """With interleave (coremltools writes it for a stack + reshape), the inputs, all of one
    shape, alternate along the axis: out[n·i + j] = values[j][i]; coremltools' own value
    inference ignores the flag."""
    values, axis = [np.asarray(v) for v in values], int(axis)
    if not bool(interleave):
        return np.concatenate(values, axis=axis)
    if len({v.shape for v in values}) != 1:
        raise LoweringError(f"MIL executor: concat(interleave=True) of shapes "
                            f"{[v.shape for v in values]}; the spec wants one shape")
    shape = list(values[0].shape)
    axis %= len(shape)
    shape[axis] *= len(values)
    return np.stack(values, axis=axis + 1).reshape(shape)


@override("constexpr_affine_dequantize")
def _affine_dequantize(quantized_data, zero_point, scale, axis, **_):
    """iOS16 compression: scale · (quantized_data − zero_point), scale and zero_point scalars
    or vectors along `axis` (of its size), computed in the scale's dtype (the output's)."""
    data, scale = np.asarray(quantized_data), np.asarray(scale)
    axis = int(axis) % data.ndim

    def along(v):
        v = np.asarray(v)
        if v.ndim == 0:
            return v.astype(scale.dtype)
        if v.shape != (data.shape[axis],):
            raise LoweringError(f"MIL executor: constexpr_affine_dequantize with a parameter of "
                                f"shape {v.shape} for data {data.shape} along axis {axis}")
        shape = [1] * data.ndim
        shape[axis] = v.shape[0]
        return v.reshape(shape).astype(scale.dtype)
    return along(scale) * (data.astype(scale.dtype) - along(zero_point))
