"""Contraction generators: jnp.dot, matmul (@, batch broadcasting), einsum, and small 1-D/2-D
lax.conv_general_dilated (strides, explicit or SAME/VALID padding, lhs/rhs dilation, feature
groups, channels-first and channels-last layouts). The second operand is usually a new input
shaped to fit."""
from .generate import Reject
from .registry import op

NUM = ("float32", "float16", "int32")


def _lhs(ctx, ranks, dtypes=NUM):
    a = ctx.operand(dtypes, pred=lambda v: len(v.shape) in ranks)
    return a, ctx.v(a)


@op("dot", "linalg", 1.0)
def _dot(ctx):
    a, v = _lhs(ctx, (1, 2))
    k = v.shape[-1]
    shape = (k,) if ctx.r.random() < 0.4 else (k, ctx.dim())
    b = ctx.new_input(shape, v.dtype)
    return "jnp.dot({0}, {1})", [a, b], False


@op("matmul", "linalg", 1.0)
def _matmul(ctx):
    a, v = _lhs(ctx, (2, 3, 4))
    batch = tuple(1 if ctx.r.random() < 0.3 else d for d in v.shape[:-2])
    if ctx.r.random() < 0.3:
        batch = batch[1:]
    b = ctx.new_input(batch + (v.shape[-1], ctx.dim()), v.dtype)
    return "{0} @ {1}", [a, b], False


# lhs spec, rhs spec, output; the rhs is built from the letters' sizes in the lhs
EINSUMS = ["ij,jk->ik", "bij,bjk->bik", "ij,kj->ik", "ij,ij->i", "i,i->", "ij,j->i",
           "bij,bkj->bki", "ijk->kij", "ii->i", "ij,k->ijk", "bhqd,bhkd->bhqk"]


@op("einsum", "linalg", 1.0)
def _einsum(ctx):
    spec = ctx.choice(EINSUMS)
    ins, out = spec.split("->")
    lhs = ins.split(",")
    a, v = _lhs(ctx, (len(lhs[0]),))
    sizes = {}
    for ch, d in zip(lhs[0], v.shape):
        if sizes.setdefault(ch, d) != d:
            raise Reject("repeated index with unequal sizes")
    if len(lhs) == 1:
        return f"jnp.einsum({spec!r}, {{0}})", [a], False
    shape = tuple(sizes.setdefault(ch, ctx.dim()) for ch in lhs[1])
    b = ctx.new_input(shape, v.dtype)
    return f"jnp.einsum({spec!r}, {{0}}, {{1}})", [a, b], False


LAYOUTS = {1: [("NCH", "OIH", "NCH"), ("NHC", "HIO", "NHC")],
           2: [("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC")]}


def _conv(nd):
    def gen(ctx):
        zero = ctx.config.conv_zero_size
        lhs_spec, rhs_spec, out_spec = ctx.choice(LAYOUTS[nd])
        groups = int(ctx.choice((1, 1, 2)))
        n = ctx.dim(allow_zero=zero)
        c = groups * int(ctx.r.integers(1, 3))
        o = groups * int(ctx.r.integers(1, 3))
        spatial = [int(ctx.r.integers(0 if zero else 1, 6)) for _ in range(nd)]
        kernel = [int(ctx.r.integers(1, 4)) for _ in range(nd)]
        sizes = {"N": n, "C": c, "H": spatial[0], "W": spatial[-1]}
        lhs_shape = tuple(sizes[ch] for ch in lhs_spec)
        rsizes = {"O": o, "I": c // groups, "H": kernel[0], "W": kernel[-1]}
        rhs_shape = tuple(rsizes[ch] for ch in rhs_spec)
        dtype = ctx.dtype(("float32", "float16"))
        # finite operands: XLA itself disagrees on whether inf/NaN times an implicit padding
        # or dilation zero contributes (NaN in its float16 convolutions, not in float32 ones)
        x = ctx.pick(lambda v: v.shape == lhs_shape and v.dtype == dtype, fresh=0.6) \
            or ctx.new_input(lhs_shape, dtype, "finite")
        w = ctx.new_input(rhs_shape, dtype, "finite")
        strides = tuple(int(ctx.r.integers(1, 3)) for _ in range(nd))
        if ctx.r.random() < 0.3:
            padding = repr(ctx.choice(("SAME", "VALID")))
        else:
            padding = repr(tuple((int(ctx.r.integers(0, 3)), int(ctx.r.integers(0, 3)))
                                 for _ in range(nd)))
        ldil = tuple(int(ctx.choice((1, 1, 2))) for _ in range(nd))
        rdil = tuple(int(ctx.choice((1, 1, 2))) for _ in range(nd))
        extra = ""
        if ldil != (1,) * nd and "'" not in padding:
            extra += f", lhs_dilation={ldil!r}"
        if rdil != (1,) * nd:
            extra += f", rhs_dilation={rdil!r}"
        if groups > 1:
            extra += f", feature_group_count={groups}"
        dn = (lhs_spec, rhs_spec, out_spec)
        return (f"lax.conv_general_dilated({{0}}, {{1}}, {strides!r}, {padding}{extra}, "
                f"dimension_numbers={dn!r})", [x, w], False)
    return gen


op("conv1d", "conv", 1.0)(_conv(1))
op("conv2d", "conv", 1.0)(_conv(2))
