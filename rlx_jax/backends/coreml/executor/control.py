"""MIL ops with nested blocks in the reference executor: `cond` and `while_loop`.

A block's operations run through the executor's own op-by-op evaluator (`_run`) in the same
environment as the enclosing block (MIL names are unique within a function, and a block may
read outer values). In a program loaded back from an .mlpackage the cond and body blocks of a
while_loop both name their inputs after the loop vars (with the same names in both blocks), so
each block's inputs are bound right before the block runs; a block's outputs may be its inputs
or outer values, which the environment resolves as well.

The milproto loader makes one dummy `const` (0.0) per nested block, named from coremltools'
global name counter, so its name may repeat a live value's name; `live_ops` skips unused
consts so such a dummy never overwrites a value in the environment.
"""
import numpy as np

from ....errors import LoweringError
from ....tables import rule_table

BLOCK_OPS, _block_op = rule_table("MIL executor block ops")


def _value(env, v, op):
    if v.name in env:
        return env[v.name]
    if v.val is not None:
        return v.val
    raise LoweringError(f"MIL executor: no value for {v.name} used by "
                        f"{getattr(op, 'op_type', 'a block output')}")


def live_ops(operations, outputs):
    """`operations` without the consts nothing reads (the loader's dummies among them)."""
    outs = {id(v) for v in outputs}
    return [op for op in operations
            if not (op.op_type == "const" and not op.outputs[0].child_ops
                    and id(op.outputs[0]) not in outs)]


def run_block(executor, block, env, args=(), ops=None):
    """Binds `args` to the block's inputs, runs its operations (`ops`: its live_ops, when the
    caller runs it many times); returns its output values."""
    if len(args) != len(block.inputs):
        raise LoweringError(f"MIL executor: block {block.name} takes {len(block.inputs)} "
                            f"inputs, got {len(args)}")
    for var, val in zip(block.inputs, args):
        env[var.name] = val
    for op in ops if ops is not None else live_ops(block.operations, block.outputs):
        executor._run(op, env)
    return [_value(env, v, block.outer_op) for v in block.outputs]


@_block_op("cond")
def _cond(executor, op, env):
    true_block, false_block = op.blocks
    pred = bool(np.asarray(_value(env, op.pred, op)).reshape(()))
    return run_block(executor, true_block if pred else false_block, env)


@_block_op("while_loop")
def _while_loop(executor, op, env):
    cond_block, body_block = op.blocks
    carry = [_value(env, v, op) for v in op.loop_vars]
    cond_ops = live_ops(cond_block.operations, cond_block.outputs)
    body_ops = live_ops(body_block.operations, body_block.outputs)
    while True:
        pred, = run_block(executor, cond_block, env, carry, cond_ops)
        if not bool(np.asarray(pred).reshape(())):
            return carry
        carry = [np.asarray(v).astype(np.asarray(c).dtype, copy=False)
                 for v, c in zip(run_block(executor, body_block, env, carry, body_ops), carry)]
