"""Control flow -> MIL: If as nested `cond`, While as `while_loop`, Scan as a `while_loop` over
a step counter. Every region is lowered by the same interpreter loop (MIL_RULES) inside the MIL
block that runs it; a region's constants (`Input`s bound to outer values) are read from the
enclosing scope, as MIL blocks may.

  If[n branches](index, *ops)  n == 1: the branch inlined (no cond, no identity of its own).
                                n >= 2: cond(index <= 0, branch 0, cond(index <= 1, branch 1,
                                ... branch n-1)): n-1 nested conds. Comparing with <= k and
                                falling through to the last branch is lax.switch's clamp.
  While(cc, bc, init)           while_loop(loop_vars=init): the cond block runs the cond region on
                                (cc, carry), the body block the body region on (bc, carry).
                                Zero iterations: the loop returns init (MIL tests cond first).
                                Rank-0 inits and body results are rank-0 tensors
                                (_rank0_tensors), one builder type per loop var.
  Scan[length L](c, init, xs)   while_loop(loop_vars=(i, *carry, *y_buffers)), i < L: the step
                                reads x slices with `gather(xs, pos, axis=0)`, runs the body, and
                                writes each y slice into its preallocated [L, ...] buffer with
                                `scatter_nd(mode="update")` at [pos]; pos = i, or L-1-i when
                                reversed (lax.scan's reverse writes ys where it reads xs). Bool
                                ys are buffered as int32 (scatter_nd has no bool) and cast back.
                                Scans are never unrolled: one rule for every length (unroll is
                                a scheduling hint for XLA and does not change results). L == 0
                                never reaches MIL: passes/empty.py folds it to (init, empty ys).

Why scatter_nd buffers and not MIL tensor lists (make_list / list_write / list_gather): both
convert, save and load back (measured with coremltools 9.0), but a list carried through a
while_loop loses its static length (`List[?, ...]` in the loaded program), which is a dynamic
shape for Core ML, and lists are no tensors for the reference executor; scatter_nd buffers stay
static [L, ...] tensors and the executor already evaluates scatter_nd exactly.

Deployment targets: `cond`, `while_loop`, `gather`, `scatter_nd`, `less_equal`, `cast` are all in
the iOS15 / macOS12 MIL opset (CoreML5), below this backend's floor (iOS16 / macOS13, MIL opset
CoreML6, package.MIN_TARGET), so any target the backend accepts runs control flow.
"""
import numpy as np

from ....ir.interpret import interpret
from ....ir.ops import OpKind as K
from .legality import mil_np_dtype
from .table import MIL_RULES, mil_rule, refuse

MIN_TARGET = {K.If: "iOS15", K.While: "iOS15", K.Scan: "iOS15"}   # per kind; see above


def _region(ctx, region, args):
    """The MIL vars of `region` run on `args` (MIL vars), in the current block. Outputs that
    are no result of an op of this region (an argument passed through, an outer value) go
    through an identity, so every block returns vars of its own (a MIL Block's outputs are
    outputs of its operations; the function's own outputs: legality.output_var)."""
    outs = interpret(region, MIL_RULES, list(args), ctx, backend="coreml")
    passed = {id(a) for a in args}
    return [ctx.mb.identity(x=o) if id(o) in passed else o for o in outs]


def _loop_variant(carry):
    """`carry` (a while_loop block's inputs) with their build-time values forgotten, so that
    the block is built once for every iteration and not for the first one only.

    coremltools' while_loop builder copies each loop var's build-time value (that of a
    constant init) onto its block input, builds the blocks, forgets the values of the inputs
    whose result differs, rebuilds once, and refuses a result whose value still differs. One
    rebuild is no fixed point: a result that equals its known init at the first step only
    because another loop var is known there (bessel_jn's carry `bs`, 0 while a cond on the
    step's parity passes it through; `s * xs[i]` with s = 0) is unknown in the rebuild, as
    the counter is, and the build failed ("Block output ... is not equal to block input ...
    after value changes"). MIL block inputs are values of every iteration, so none is a
    constant: the builder's own reset (`_sym_val = None`, what its rebuild does) is applied to
    all of them as each block is built (both blocks share these vars). Nothing in the program
    changes; its ops no longer fold values of the first iteration."""
    for v in carry:
        v._sym_val = None
    return carry


def _not_constant(ctx, outs, anchor):
    """Loop-body results coremltools' builder must not see as constants: it refuses a result
    whose value is known while its loop var's is not (a carry reset to a constant each step).
    `select(flag, k, k)` is k whatever `flag` is; a flag computed from the block input
    `anchor` (a loop var, of no value at build time: _loop_variant) has no value, so the
    result is no constant."""
    if all(o.val is None for o in outs):
        return outs
    from coremltools.converters.mil.mil import types
    mb = ctx.mb
    flag = anchor
    if anchor.rank:
        flag = mb.slice_by_size(x=anchor, begin=ctx.ints([0] * anchor.rank),
                                size=ctx.ints([1] * anchor.rank))
        flag = mb.reshape(x=flag, shape=np.zeros((0,), np.int32))
    if flag.dtype != types.bool:
        flag = mb.cast(x=flag, dtype="bool")
    return [o if o.val is None else mb.select(cond=flag, a=o, b=o) for o in outs]


def _rank0_tensors(ctx, xs):
    """`xs` with every rank-0 value typed as a rank-0 tensor. coremltools' builder has two
    types for one MIL value of shape (): a scalar (`fp32`: gather at a scalar index, ops on
    scalars) and a rank-0 tensor (`tensor[(), fp32]`: a const of a 0-d array, an op with a
    rank-0 tensor operand), and while_loop refuses a loop var whose body result has the other
    one ("loop_vars ... changes in the body of while_loop: double -> tensor", random_gamma_grad
    under lax.map). Both serialize as the same rank-0 TensorType; inits and body results are
    given one of them (`reshape` to shape (), a no-op on the value) so the types agree."""
    from coremltools.converters.mil.mil import types
    return [x if types.is_tensor(x.sym_type) or x.rank
            else ctx.mb.reshape(x=x, shape=np.zeros((0,), np.int32)) for x in xs]


def _no_empty(node):
    """Core ML has no empty tensors; top-level ones are folded before lowering (passes/empty.py)."""
    if any(0 in v.shape for v in (*node.inputs, *node.outputs)):
        refuse(node, "a zero-size operand or result of control flow",
               "avoid the empty value here, or use backend='xla'")


def _result(node, outs):
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return outs[0] if len(node.outputs) == 1 else tuple(outs)


@mil_rule(K.If)
def _if(ctx, node, index, *operands):
    _no_empty(node)
    mb, branches = ctx.mb, node.regions
    if len(branches) == 1:              # inlined in the current block, which names its own
        return _result(node, interpret(branches[0], MIL_RULES, list(operands), ctx,
                                       backend="coreml"))

    def switch(k):
        if k == len(branches) - 1:
            return _region(ctx, branches[k], operands)
        return mb.cond(pred=mb.less_equal(x=index, y=np.int32(k)),
                       _true_fn=lambda: _region(ctx, branches[k], operands),
                       _false_fn=lambda: switch(k + 1))
    return _result(node, switch(0))


@mil_rule(K.While)
def _while(ctx, node, *operands):
    _no_empty(node)
    cond, body = node.regions
    nc, nb = node.attrs["cond_nconsts"], node.attrs["body_nconsts"]
    cc, bc, init = operands[:nc], operands[nc:nc + nb], operands[nc + nb:]
    if not init:
        refuse(node, "a while loop without loop-carried values")
    outs = ctx.mb.while_loop(
        _cond=lambda *carry: _region(ctx, cond, (*cc, *_loop_variant(carry)))[0],
        _body=lambda *carry: tuple(_rank0_tensors(ctx, _not_constant(
            ctx, _region(ctx, body, (*bc, *_loop_variant(carry))), carry[0]))),
        loop_vars=tuple(_rank0_tensors(ctx, init)))
    return _result(node, outs)


@mil_rule(K.Scan)
def _scan(ctx, node, *operands):
    mb = ctx.mb
    body, = node.regions
    length, reverse = node.attrs["length"], node.attrs["reverse"]
    nconst, ncarry = node.attrs["num_consts"], node.attrs["num_carry"]
    consts = operands[:nconst]
    init = operands[nconst:nconst + ncarry]
    # bool xs are sliced as int32 (MIL's gather takes no bool), each slice cast back
    xs_bool = [v.dtype == np.bool_ for v in node.inputs[nconst + ncarry:]]
    xs = [mb.cast(x=x, dtype="int32") if b else x
          for x, b in zip(operands[nconst + ncarry:], xs_bool)]
    ys = node.outputs[ncarry:]
    _no_empty(node)                     # zero-length scans are folded first (passes/empty_control.py)
    is_bool = [y.dtype == np.bool_ for y in ys]
    bufs = [ctx.const(np.zeros(y.shape, np.int32 if b else mil_np_dtype(y.dtype)))
            for y, b in zip(ys, is_bool)]

    def step(i, *state):
        i, *state = _loop_variant((i, *state))
        carry, buffers = state[:ncarry], state[ncarry:]
        pos = mb.sub(x=np.int32(length - 1), y=i) if reverse else i
        slices = [mb.gather(x=x, indices=pos, axis=0) for x in xs]
        slices = [mb.cast(x=v, dtype="bool") if b else v for v, b in zip(slices, xs_bool)]
        outs = _not_constant(ctx, _region(ctx, body, (*consts, *carry, *slices)), i)
        at = mb.reshape(x=pos, shape=np.ones((2,), np.int32)) if buffers else None
        new = []
        for buf, y, b in zip(buffers, outs[ncarry:], is_bool):
            y = mb.cast(x=y, dtype="int32") if b else y
            new.append(mb.scatter_nd(data=buf, indices=at,
                                     updates=mb.expand_dims(x=y, axes=[0]), mode="update"))
        return (mb.add(x=i, y=np.int32(1)), *_rank0_tensors(ctx, outs[:ncarry]), *new)

    def test(*state):
        return mb.less(x=_loop_variant(state)[0], y=np.int32(length))

    outs = mb.while_loop(_cond=test, _body=step,
                         loop_vars=(ctx.const(np.int32(0)), *_rank0_tensors(ctx, init), *bufs))
    outs = list(outs[1:])
    outs[ncarry:] = [mb.cast(x=y, dtype="bool") if b else y
                     for y, b in zip(outs[ncarry:], is_bool)]
    return _result(node, outs)
