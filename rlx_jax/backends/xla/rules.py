"""Reference lowering: every primitive OpKind back to jax.lax. This table also defines the
semantics the shape inference (ir/shapes.py) and every other backend must match."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import windowed_reductions as _wr

from ...ir.interpret import rule_table
from ...ir.ops import OpKind as K

XLA_RULES, xla_rule = rule_table("XLA_RULES")

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


def _bcast(*xs):
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
    return [jnp.broadcast_to(x, shape) for x in xs]


@xla_rule(K.Constant)
def _constant(ctx, node):
    return jnp.asarray(node.attrs["value"])


@xla_rule(K.Activation)
def _activation(ctx, node, x):
    fn = node.attrs["fn"]
    if fn == "integer_pow":
        return lax.integer_pow(x, node.attrs["y"])
    if fn == "round":
        return lax.round(x, lax.RoundingMethod(node.attrs.get("rounding", 0)))
    return UNARY[fn](x)


@xla_rule(K.Binary)
def _binary(ctx, node, x, y):
    if x.dtype != y.dtype:
        raise TypeError(f"Binary operands differ in dtype: {x.dtype} vs {y.dtype}")
    return BINARY[node.attrs["fn"]](*_bcast(x, y))


@xla_rule(K.Compare)
def _compare(ctx, node, x, y):
    if x.dtype != y.dtype:
        raise TypeError(f"Compare operands differ in dtype: {x.dtype} vs {y.dtype}")
    return COMPARE[node.attrs["fn"]](*_bcast(x, y))


xla_rule(K.Where)(lambda ctx, node, p, x, y: lax.select(*_bcast(p, x, y)))
xla_rule(K.Cast)(lambda ctx, node, x: lax.convert_element_type(x, node.attrs["dtype"]))
xla_rule(K.Bitcast)(lambda ctx, node, x: lax.bitcast_convert_type(x, node.attrs["dtype"]))
xla_rule(K.ReducePrecision)(lambda ctx, node, x: lax.reduce_precision(
    x, node.attrs["exponent_bits"], node.attrs["mantissa_bits"]))
xla_rule(K.Iota)(lambda ctx, node: lax.broadcasted_iota(
    node.attrs["dtype"], node.attrs["shape"], node.attrs["dimension"]))
xla_rule(K.DotGeneral)(lambda ctx, node, x, y: lax.dot_general(
    x, y, node.attrs["dimension_numbers"],
    preferred_element_type=node.attrs.get("preferred_element_type")))
xla_rule(K.MatMul)(lambda ctx, node, x, y: jnp.matmul(x, y))
xla_rule(K.Reduce)(lambda ctx, node, x: REDUCE[node.attrs["fn"]](x, node.attrs["axes"]))
xla_rule(K.ArgMax)(lambda ctx, node, x: lax.argmax(x, node.attrs["axis"],
                                                   node.attrs["index_dtype"]))
xla_rule(K.ArgMin)(lambda ctx, node, x: lax.argmin(x, node.attrs["axis"],
                                                   node.attrs["index_dtype"]))


@xla_rule(*CUMULATIVE)
def _cumulative(ctx, node, x):
    return CUMULATIVE[node.kind](x, axis=node.attrs["axis"], reverse=node.attrs["reverse"])


@xla_rule(K.Sort)
def _sort(ctx, node, *xs):
    out = lax.sort(xs, dimension=node.attrs["dimension"], is_stable=node.attrs["is_stable"],
                   num_keys=node.attrs["num_keys"])
    return tuple(out) if len(xs) > 1 else out[0]


xla_rule(K.TopK)(lambda ctx, node, x: tuple(lax.top_k(x, node.attrs["k"])))
xla_rule(K.Reshape)(lambda ctx, node, x: lax.reshape(x, node.attrs["shape"]))
xla_rule(K.Transpose)(lambda ctx, node, x: lax.transpose(x, node.attrs["perm"]))
xla_rule(K.Expand)(lambda ctx, node, x: lax.broadcast_in_dim(
    x, node.attrs["shape"], node.attrs["dims"]))
xla_rule(K.Reverse)(lambda ctx, node, x: lax.rev(x, node.attrs["axes"]))
xla_rule(K.Concat)(lambda ctx, node, *xs: lax.concatenate(xs, node.attrs["axis"]))
xla_rule(K.Pad)(lambda ctx, node, x, v: lax.pad(x, v, node.attrs["config"]))
xla_rule(K.Slice)(lambda ctx, node, x: lax.slice(
    x, node.attrs["start"], node.attrs["limit"], node.attrs["strides"]))
xla_rule(K.Narrow)(lambda ctx, node, x: lax.slice_in_dim(
    x, node.attrs["start"], node.attrs["start"] + node.attrs["length"], axis=node.attrs["axis"]))
# starts are clamped into bounds; negative starts are NOT wrapped (the primitive's semantics)
xla_rule(K.DynamicSlice)(lambda ctx, node, x, *starts: lax.dynamic_slice(
    x, starts, node.attrs["sizes"], allow_negative_indices=False))
xla_rule(K.DynamicUpdateSlice)(lambda ctx, node, x, u, *starts: lax.dynamic_update_slice(
    x, u, starts, allow_negative_indices=False))


@xla_rule(K.Gather)
def _gather(ctx, node, x, idx):
    a = node.attrs
    return lax.gather(x, idx, a["dimension_numbers"], a["slice_sizes"], mode=a["mode"],
                      fill_value=a.get("fill_value"), indices_are_sorted=a["indices_are_sorted"],
                      unique_indices=a["unique_indices"])


SCATTER = {"replace": lax.scatter, "add": lax.scatter_add, "mul": lax.scatter_mul,
           "min": lax.scatter_min, "max": lax.scatter_max}


@xla_rule(K.Scatter, K.ScatterAdd)
def _scatter(ctx, node, x, idx, upd):
    a = node.attrs
    fn = "add" if node.kind is K.ScatterAdd else a["fn"]
    return SCATTER[fn](x, idx, upd, a["dimension_numbers"], mode=a["mode"],
                       indices_are_sorted=a["indices_are_sorted"],
                       unique_indices=a["unique_indices"])


@xla_rule(K.Conv)
def _conv(ctx, node, x, w):
    a = node.attrs
    return lax.conv_general_dilated(
        x, w, a["window_strides"], a["padding"], a["lhs_dilation"], a["rhs_dilation"],
        lax.ConvDimensionNumbers(*a["dimension_numbers"]), a["feature_group_count"],
        a["batch_group_count"],
        preferred_element_type=a.get("preferred_element_type"))


POOL_INIT = {"sum": lambda dt: np.array(0, dt), "max": lambda dt: _lowest(dt),
             "min": lambda dt: _highest(dt)}
POOL_FN = {"sum": lax.add, "max": lax.max, "min": lax.min}


def _lowest(dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.array(False)
    return np.array(-np.inf, dt) if jnp.issubdtype(dt, jnp.floating) else np.array(
        jnp.iinfo(dt).min, dt)


def _highest(dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.array(True)
    return np.array(np.inf, dt) if jnp.issubdtype(dt, jnp.floating) else np.array(
        jnp.iinfo(dt).max, dt)


@xla_rule(K.Pool)
def _pool(ctx, node, x):
    a = node.attrs
    fn = a["fn"]
    return lax.reduce_window(x, POOL_INIT[fn](x.dtype), POOL_FN[fn], a["window_dimensions"],
                             a["window_strides"], a["padding"], a["base_dilation"],
                             a["window_dilation"])


@xla_rule(K.SelectAndScatterAdd)
def _select_and_scatter_add(ctx, node, source, operand):
    a = node.attrs
    prim = lax.ge_p if a["select_prim"] == "ge" else lax.le_p
    return _wr._select_and_scatter_add(source, operand, prim, a["window_dimensions"],
                                       a["window_strides"], a["padding"])


@xla_rule(K.SelectAndGatherAdd)
def _select_and_gather_add(ctx, node, tangents, operand):
    a = node.attrs
    prim = lax.ge_p if a["select_prim"] == "ge" else lax.le_p
    return _wr._select_and_gather_add(tangents, operand, prim, a["window_dimensions"],
                                      a["window_strides"], a["padding"], a["base_dilation"],
                                      a["window_dilation"])
