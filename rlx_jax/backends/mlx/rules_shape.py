"""Shape and data movement: Reshape, Transpose, Expand, Reverse, Concat, Pad (interior and
negative), Slice, Narrow, DynamicSlice / DynamicUpdateSlice (start indices clamped as JAX)."""
import mlx.core as mx

from ...ir.ops import OpKind as K
from .table import mlx_rule

mlx_rule(K.Reshape)(lambda ctx, node, x: mx.reshape(x, node.attrs["shape"]))
mlx_rule(K.Transpose)(lambda ctx, node, x: mx.transpose(x, node.attrs["perm"]))
mlx_rule(K.Concat)(lambda ctx, node, *xs: mx.concatenate(xs, axis=node.attrs["axis"]))


@mlx_rule(K.Expand)
def _expand(ctx, node, x):
    shape, dims = node.attrs["shape"], node.attrs["dims"]
    view = [1] * len(shape)
    for i, d in enumerate(dims):
        view[d] = x.shape[i]
    return mx.broadcast_to(x.reshape(view), tuple(shape))


@mlx_rule(K.Reverse)
def _reverse(ctx, node, x):
    axes = set(node.attrs["axes"])
    if not axes:
        return x
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))]


def pad(x, value, config):
    """lax.pad: per axis (lo, hi, interior); negative lo/hi crop. `value` is a scalar array."""
    value = value.astype(x.dtype)
    if any(i > 0 for _, _, i in config):
        shape = [d + max(d - 1, 0) * i for d, (_, _, i) in zip(x.shape, config)]
        out = mx.full(shape, value, dtype=x.dtype)
        out[tuple(slice(None, None, i + 1) for _, _, i in config)] = x
        x = out
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config]
    if any(lo or hi for lo, hi in grow):
        x = mx.pad(x, grow, constant_values=value)
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        x = x[tuple(slice(-lo if lo < 0 else 0, d + hi if hi < 0 else d)
                    for d, (lo, hi, _) in zip(x.shape, config))]
    return x


mlx_rule(K.Pad)(lambda ctx, node, x, v: pad(x, v, node.attrs["config"]))


@mlx_rule(K.Slice)
def _slice(ctx, node, x):
    a = node.attrs
    return x[tuple(slice(s, l, st) for s, l, st in zip(a["start"], a["limit"], a["strides"]))]


@mlx_rule(K.Narrow)
def _narrow(ctx, node, x):
    a = node.attrs
    idx = [slice(None)] * x.ndim
    idx[a["axis"]] = slice(a["start"], a["start"] + a["length"])
    return x[tuple(idx)]


def _starts(shape, sizes, starts):
    """Start indices clamped to [0, dim - size], as one int32 vector."""
    out = []
    for d, s, st in zip(shape, sizes, starts):
        st = st.astype(mx.int32) if st.dtype != mx.int32 else st
        out.append(mx.clip(st, 0, d - s).reshape(1))
    return mx.concatenate(out) if out else mx.zeros((0,), mx.int32)


@mlx_rule(K.DynamicSlice)
def _dynamic_slice(ctx, node, x, *starts):
    sizes = node.attrs["sizes"]
    if x.ndim == 0:
        return x
    return mx.slice(x, _starts(x.shape, sizes, starts), list(range(x.ndim)), list(sizes))


@mlx_rule(K.DynamicUpdateSlice)
def _dynamic_update_slice(ctx, node, x, upd, *starts):
    if x.ndim == 0:
        return upd
    return mx.slice_update(x, upd, _starts(x.shape, upd.shape, starts), list(range(x.ndim)))
