"""REFERENCE[kind]: the semantics of every IR kind, as JAX code of the node's operands and
attributes: `ref(*operands, **node.attrs)`.

This one table defines what a kind means. The Builder's shape inference and the verifier
evaluate it abstractly (`jax.eval_shape`, ir/shapes.py), the `xla` backend runs it, and every
other backend must match it. The primitive kinds are defined here; `rlx_jax.nn` registers the
reference of each high-level and backward kind right where it defines the primitive
(`nn/primitive.py`), and the kinds recognised from JAX's own autodiff output are at the end.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import host, prng
from .identities import identity
from .reference_collectives import COLLECTIVE_REFERENCE
from .reference_linalg import LINALG_REFERENCE
from .reference_optim import OPTIM_REFERENCE
from .reference_rnn import RNN_REFERENCE
from .reference_quant import QUANT_REFERENCE
from .reference_xent import XENT_REFERENCE
from .reference_sgd import SGD_REFERENCE
from ..tables import rule_table
from .interpret import interpret
from ..jax_internals import module
from .ops import OpKind as K

REFERENCE, reference = rule_table("REFERENCE")
_wr = module("windowed_reductions")
_core = module("core")


def evaluate(node, *operands):
    """Runs the reference semantics of `node` on arrays; a tuple for a multi-output node. A
    node's regions reach its reference as functions (`regions=`), as lax takes branches."""
    out = apply(node, operands)
    if isinstance(out, (tuple, list)):
        out = tuple(out)
        return out[0] if len(out) == 1 and len(node.outputs) == 1 else out
    return out


def apply(node, operands):
    """REFERENCE[node.kind] on `operands` (arrays or tracers) with the node's attributes."""
    ref = REFERENCE[node.kind]
    if node.regions:
        return ref(*operands, regions=tuple(region_function(r) for r in node.regions),
                   **node.attrs)
    return ref(*operands, **node.attrs)


class _ReferenceRules:
    """The interpreter's view of REFERENCE: every kind's rule evaluates its reference."""

    def get(self, kind):
        return _rule if kind in REFERENCE else None


def _rule(ctx, node, *operands):
    return evaluate(node, *operands)


def region_function(graph):
    """The region `graph` as a function of its inputs returning the tuple of its outputs."""
    def run(*args):
        return tuple(interpret(graph, _ReferenceRules(), args, backend="reference"))
    return run


UNARY = {
    "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "is_finite": lax.is_finite, "exp": lax.exp, "exp2": lax.exp2, "log": lax.log,
    "log1p": lax.log1p, "expm1": lax.expm1, "tanh": lax.tanh, "sigmoid": lax.logistic,
    "sin": lax.sin, "cos": lax.cos, "tan": lax.tan, "asin": lax.asin, "acos": lax.acos,
    "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh,
    "acosh": lax.acosh, "atanh": lax.atanh, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt,
    "cbrt": lax.cbrt, "square": lax.square, "erf": lax.erf, "erfc": lax.erfc,
    "erf_inv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma, "not": lax.bitwise_not,
    "population_count": lax.population_count, "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "silu": jax.nn.silu,
}
BINARY = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": lax.div, "rem": lax.rem,
    "pow": lax.pow, "max": lax.max, "min": lax.min, "atan2": lax.atan2,
    "nextafter": lax.nextafter, "and": lax.bitwise_and, "or": lax.bitwise_or,
    "xor": lax.bitwise_xor, "shift_left": lax.shift_left,
    "shift_right_logical": lax.shift_right_logical,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
}
COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}
REDUCE = {"sum": lax.reduce_sum, "max": lax.reduce_max, "min": lax.reduce_min,
          "prod": lax.reduce_prod, "and": lax.reduce_and, "or": lax.reduce_or,
          "xor": lax.reduce_xor}
CUMULATIVE = {K.Cumsum: lax.cumsum, K.CumProd: lax.cumprod, K.CumMax: lax.cummax,
              K.CumMin: lax.cummin, K.CumLogSumExp: lax.cumlogsumexp}
SCATTER = {"replace": lax.scatter, "add": lax.scatter_add, "mul": lax.scatter_mul,
           "min": lax.scatter_min, "max": lax.scatter_max}
SELECT = {"ge": lax.ge_p, "le": lax.le_p}


def _bcast(*xs):
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
    return [jnp.broadcast_to(x, shape) for x in xs]


def _same_dtype(what, x, y):
    if x.dtype != y.dtype:
        raise TypeError(f"{what} operands differ in dtype: {x.dtype} vs {y.dtype}")


# ---- elementwise ----
reference(K.Constant)(lambda *, value: jnp.asarray(value))


@reference(K.Activation)
def activation(x, *, fn, y=None, rounding=0):
    if fn == "integer_pow":
        return lax.integer_pow(x, y)
    if fn == "round":
        return lax.round(x, lax.RoundingMethod(rounding))
    return UNARY[fn](x)


@reference(K.Binary)
def binary(x, y, *, fn):
    _same_dtype("Binary", x, y)
    return BINARY[fn](*_bcast(x, y))


@reference(K.Compare)
def compare(x, y, *, fn):
    _same_dtype("Compare", x, y)
    return COMPARE[fn](*_bcast(x, y))


reference(K.Where)(lambda p, x, y: lax.select(*_bcast(p, x, y)))
reference(K.Cast)(lambda x, *, dtype: lax.convert_element_type(x, dtype))
reference(K.Bitcast)(lambda x, *, dtype: lax.bitcast_convert_type(x, dtype))
reference(K.ReducePrecision)(lambda x, *, exponent_bits, mantissa_bits: lax.reduce_precision(
    x, exponent_bits, mantissa_bits))
@reference(K.LoraMatMul)
def lora_matmul(x, w, a, b, *, scale):
    """A LoRA layer (recognized, passes/pattern_refs.py): x·W + (x·A·B)·scale, with x[..., D],
    W[D, N], A[D, R], B[R, N]; scale 1.0 where the formula has none (no multiply)."""
    low = (x @ a) @ b
    return x @ w + (low if scale == 1.0 else low * scale)


reference(K.DimSize)(lambda *, dim, dtype: jnp.asarray(_core.dimension_as_value(dim), dtype))
reference(K.Iota)(lambda *, dtype, shape, dimension: lax.broadcasted_iota(dtype, shape, dimension))

# ---- contraction, reductions, scans, sorting ----
reference(K.DotGeneral)(lambda x, y, *, dimension_numbers, preferred_element_type=None:
                        lax.dot_general(x, y, dimension_numbers,
                                        preferred_element_type=preferred_element_type))
reference(K.MatMul)(lambda x, y: jnp.matmul(x, y))
reference(K.Reduce)(lambda x, *, fn, axes: REDUCE[fn](x, axes))
reference(K.ArgMax)(lambda x, *, axis, index_dtype: lax.argmax(x, axis, index_dtype))
reference(K.ArgMin)(lambda x, *, axis, index_dtype: lax.argmin(x, axis, index_dtype))
for _kind, _fn in CUMULATIVE.items():   # one loop over a literal table
    reference(_kind)(lambda x, *, axis, reverse, _fn=_fn: _fn(x, axis=axis, reverse=reverse))


@reference(K.Sort)
def sort(*xs, dimension, is_stable, num_keys):
    out = lax.sort(xs, dimension=dimension, is_stable=is_stable, num_keys=num_keys)
    return tuple(out) if len(xs) > 1 else out[0]


reference(K.TopK)(lambda x, *, k: tuple(lax.top_k(x, k)))

# ---- shape and data movement ----
reference(K.Reshape)(lambda x, *, shape: lax.reshape(x, shape))
reference(K.Transpose)(lambda x, *, perm: lax.transpose(x, perm))
reference(K.Expand)(lambda x, *, shape, dims: lax.broadcast_in_dim(x, shape, dims))
reference(K.Reverse)(lambda x, *, axes: lax.rev(x, axes))
reference(K.Concat)(lambda *xs, axis: lax.concatenate(xs, axis))
reference(K.Pad)(lambda x, v, *, config: lax.pad(x, v, config))
reference(K.Slice)(lambda x, *, start, limit, strides: lax.slice(x, start, limit, strides))
reference(K.Narrow)(lambda x, *, axis, start, length: lax.slice_in_dim(
    x, start, start + length, axis=axis))
# starts are clamped into bounds; negative starts are NOT wrapped (the primitive's semantics)
reference(K.DynamicSlice)(lambda x, *starts, sizes: lax.dynamic_slice(
    x, starts, sizes, allow_negative_indices=False))
reference(K.DynamicUpdateSlice)(lambda x, u, *starts: lax.dynamic_update_slice(
    x, u, starts, allow_negative_indices=False))


@reference(K.Gather)
def gather(x, idx, *, dimension_numbers, slice_sizes, mode, fill_value=None,
           indices_are_sorted, unique_indices):
    return lax.gather(x, idx, dimension_numbers, slice_sizes, mode=mode, fill_value=fill_value,
                      indices_are_sorted=indices_are_sorted, unique_indices=unique_indices)


@reference(K.Scatter)
def scatter(x, idx, upd, *, fn, dimension_numbers, mode, indices_are_sorted, unique_indices):
    return SCATTER[fn](x, idx, upd, dimension_numbers, mode=mode,
                       indices_are_sorted=indices_are_sorted, unique_indices=unique_indices)


reference(K.ScatterAdd)(lambda x, idx, upd, **attrs: scatter(x, idx, upd, fn="add", **attrs))


# ---- convolution and windows ----
@reference(K.Conv)
def conv(x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
         feature_group_count, batch_group_count, preferred_element_type=None):
    return lax.conv_general_dilated(
        x, w, window_strides, padding, lhs_dilation, rhs_dilation,
        lax.ConvDimensionNumbers(*dimension_numbers), feature_group_count, batch_group_count,
        preferred_element_type=preferred_element_type)


POOL_FN = {"sum": lax.add, "max": lax.max, "min": lax.min}


@reference(K.Pool)
def pool(x, *, fn, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    return lax.reduce_window(x, identity(fn, x.dtype), POOL_FN[fn], window_dimensions,
                             window_strides, padding, base_dilation, window_dilation)


@reference(K.SelectAndScatterAdd)
def select_and_scatter_add(source, operand, *, select_prim, window_dimensions, window_strides,
                           padding):
    return _wr._select_and_scatter_add(source, operand, SELECT[select_prim], window_dimensions,
                                       window_strides, padding)


@reference(K.SelectAndGatherAdd)
def select_and_gather_add(tangents, operand, *, select_prim, window_dimensions, window_strides,
                          padding, base_dilation, window_dilation):
    return _wr._select_and_gather_add(tangents, operand, SELECT[select_prim], window_dimensions,
                                      window_strides, padding, base_dilation, window_dilation)


# ---- control flow: regions arrive as functions returning tuples ----
@reference(K.If)
def if_(index, *operands, regions):
    """regions[index](*operands), the index clamped into range (lax.switch)."""
    return lax.switch(index, regions, *operands)


@reference(K.While)
def while_(*operands, regions, cond_nconsts, body_nconsts):
    """regions = (cond, body): cond(*cond_consts, *carry) -> (pred,); body(*body_consts,
    *carry) -> carry."""
    cond, body = regions
    cc, bc = operands[:cond_nconsts], operands[cond_nconsts:cond_nconsts + body_nconsts]
    init = tuple(operands[cond_nconsts + body_nconsts:])
    return lax.while_loop(lambda c: cond(*cc, *c)[0], lambda c: body(*bc, *c), init)


@reference(K.Scan)
def scan(*operands, regions, length, reverse, num_consts, num_carry, unroll=1):
    """regions = (body,): body(*consts, *carry, *x) -> (*carry, *y), over axis 0 of xs; the
    outputs are the final carry then the stacked ys."""
    body, = regions
    consts = operands[:num_consts]
    init = tuple(operands[num_consts:num_consts + num_carry])
    xs = tuple(operands[num_consts + num_carry:])

    def step(carry, x):
        out = body(*consts, *carry, *x)
        return out[:num_carry], out[num_carry:]
    # with xs, their leading axis is the length (a symbolic one included: lax.scan takes only
    # an int `length`)
    carry, ys = lax.scan(step, init, xs, length=None if xs else length, reverse=reverse,
                         unroll=unroll)
    return (*carry, *ys)


# ---- backward kinds recognised from JAX's own autodiff output (passes/recognize.py) ----
@reference(K.MaxPool2dBackward)
def max_pool2d_backward(x, dy, *, window_dimensions, window_strides, padding):
    return _wr._select_and_scatter_add(dy, x, lax.ge_p, window_dimensions, window_strides,
                                       padding)


CONV_ATTRS = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "dimension_numbers",
              "feature_group_count", "batch_group_count", "preferred_element_type")


def conv2d_backward_input(dy, w, *, input_shape, **attrs):
    """The transpose of Conv (attributes CONV_ATTRS) with respect to its input."""
    x = jax.ShapeDtypeStruct(tuple(input_shape), dy.dtype)
    a = {k: attrs[k] for k in CONV_ATTRS}
    return jax.linear_transpose(lambda x: conv(x, w, **a), x)(dy)[0]


def conv2d_backward_weight(x, dy, *, weight_shape, **attrs):
    """The transpose of Conv (attributes CONV_ATTRS) with respect to its kernel."""
    w = jax.ShapeDtypeStruct(tuple(weight_shape), dy.dtype)
    a = {k: attrs[k] for k in CONV_ATTRS}
    return jax.linear_transpose(lambda w: conv(x, w, **a), w)(dy)[0]


reference(K.Conv2dBackwardInput)(conv2d_backward_input)
reference(K.Conv2dBackwardWeight)(conv2d_backward_weight)


def gather_dimension_numbers(index_rank, slice_rank):
    """Scatter dimension numbers of the embedding-gather transpose: indices[..., 1] pick rows
    of axis 0 of a table whose other `slice_rank` axes are whole slices."""
    return lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(index_rank, index_rank + slice_rank)),
        inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))


@reference(K.GatherBackward)
def gather_backward(dy, indices, *, axis, num, mode):
    """Scatter-add of dy's slices into zeros[num, ...] at integer `indices` (axis 0 of the
    table); `mode` is the scatter mode of the transposed gather (out-of-bounds handling)."""
    assert axis == 0, axis
    slice_shape = dy.shape[indices.ndim:]
    table = jnp.zeros((num,) + slice_shape, dy.dtype)
    dn = gather_dimension_numbers(indices.ndim, len(slice_shape))
    return lax.scatter_add(table, indices[..., None], dy, dn, mode=mode)


reference(K.CumsumBackward)(lambda dy, *, axis, reverse: lax.cumsum(
    dy, axis=axis, reverse=not reverse))


# ---- randomness: typed keys (ir/prng.py key dtypes) and JAX's key functions on their data ----
def _kd(k):
    return prng.dtype_of(k.dtype)


reference(K.RandomWrap)(lambda x, *, key_dtype: prng.wrap(x, key_dtype))
reference(K.RandomUnwrap)(lambda k: prng.unwrap(k))
reference(K.RandomSeed)(lambda s, *, key_dtype: prng.wrap(prng.seed(s, dtype=key_dtype),
                                                          key_dtype))
reference(K.RandomBits)(lambda k, *, bit_width, shape, partitionable: prng.bits(
    prng.unwrap(k), dtype=_kd(k), bit_width=bit_width, shape=shape,
    partitionable=partitionable))
reference(K.RandomSplit)(lambda k, *, shape, partitionable: prng.wrap(prng.split(
    prng.unwrap(k), dtype=_kd(k), shape=shape, partitionable=partitionable), _kd(k)))
reference(K.RandomFoldIn)(lambda k, m: prng.wrap(prng.fold_in(prng.unwrap(k), m,
                                                              dtype=_kd(k)), _kd(k)))
# In its own jit, as jax.random.gamma binds it (inside jit(_gamma)): XLA's CPU code decides
# fused multiply-adds per computation, so without the call boundary its floats differ by ulps.
reference(K.RandomGamma)(lambda k, a, *, log_space: jax.jit(
    lambda k, a: prng.random_gamma_p.bind(k, a, log_space=log_space))(k, a))


@reference(K.ThreeFry2x32)
def threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 hash (20 rounds) of counters (x1, x2) under key (k1, k2), uint32,
    broadcast together."""
    return tuple(prng.threefry2x32_p.bind(*_bcast(k1, k2, x1, x2)))


reference(K.HostPrimitive)(host.bind)
_TABLES = {**LINALG_REFERENCE, **COLLECTIVE_REFERENCE, **OPTIM_REFERENCE,   # literal tables
           **QUANT_REFERENCE, **RNN_REFERENCE, **XENT_REFERENCE,
           **SGD_REFERENCE}
for _kind, _ref in _TABLES.items():
    reference(_kind)(_ref)
