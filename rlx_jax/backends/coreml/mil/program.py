"""IR -> MIL: MIL_RULES (OpKind -> rule) run through the one interpreter loop inside a MIL
Function, giving a coremltools MIL Program.

A rule is `rule(ctx, node, *operands) -> mil Var | tuple`; operands are MIL Vars. The table and
what the rules share (MilCtx, refuse, UNARY_FNS; reduction identities: ir/identities.py) are in
mil/table.py; the families, which this package's __init__ imports, live in elementwise.py (its
special functions in special.py), shape.py, reduce.py, index.py, conv.py, control.py, optim.py
and, for the high-level and backward kinds, nn.py (normalizations and the small DiT ops),
nn_attn.py (attention, rope, softmax cross-entropy) and nn_conv.py (pooling and convolution
gradients). JAX semantics are those of
rlx_jax/ir/reference.py.
"""
from ....errors import LoweringError
from ....ir.interpret import interpret
from . import legality
from .dynamic import SymbolicRules, mil_shape, read_symbols
from .state import check as state_check, spec as state_spec
from .table import MIL_RULES, MilCtx

__all__ = ["MIL_RULES", "MilProgram", "sanitize", "io_names", "build_program"]


class MilProgram:
    """A built MIL program plus the names and dtypes of its model inputs and outputs."""

    def __init__(self, program, opset, input_names, output_names, boundary):
        self.program, self.opset = program, opset
        self.input_names, self.output_names = input_names, output_names
        self.boundary = boundary              # legality.Boundary: host-side dtype conversions

    def op_counts(self):
        counts = {}
        for op in _ops(self.program.functions["main"].operations):
            if op.op_type == "const":
                continue
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return dict(sorted(counts.items()))

    def as_text(self):
        return str(self.program)


def _ops(operations):
    """Every operation, those in nested blocks (cond, while_loop) included."""
    for op in operations:
        yield op
        for block in op.blocks:
            yield from _ops(block.operations)


def sanitize(name, used):
    """A MIL/Core ML identifier from a pytree path; unique within `used`."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)).strip("_") or "x"
    while "__" in out:
        out = out.replace("__", "_")
    if out[0].isdigit():
        out = "x_" + out
    base, i = out, 1
    while out in used:
        out, i = f"{base}_{i}", i + 1
    used.add(out)
    return out


def io_names(graph, input_names=None, output_names=None):
    """Model input and output names: given (sanitised, made unique) or input_<i> / output[_<i>]."""
    used = set()

    def names(prefix, n, given):
        if given is not None:
            given = list(given)
            if len(given) != n:
                raise LoweringError(f"{prefix}_names has {len(given)} names for {n} values")
            return [sanitize(g, used) for g in given]
        if n == 1 and prefix == "output":
            return [sanitize("output", used)]
        return [sanitize(f"{prefix}_{i}", used) for i in range(n)]
    return (names("input", len(graph.inputs), input_names or graph.input_names),
            names("output", len(graph.outputs), output_names or graph.output_names))


def build_program(graph, opset, input_names=None, output_names=None, state=None):
    """Lowers `graph` to a MIL Program with one function "main". The graph holds no zero-size
    value (backend.py folds them away first, passes/empty.py); values above rank 5 that tiles pass
    through are rewritten here (passes/rank.py). `state`: {model input name: model output
    name} kept as Core ML state (mil/state.py)."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program
    from ..passes.rank import lower_rank
    graph = lower_rank(graph)
    boundary = legality.check_graph(graph)
    in_names, out_names = io_names(graph, input_names, output_names)
    pairs = state_check(state, graph, in_names, out_names, opset)
    symbols = {}          # a flexible input's symbolic dimensions: one MIL symbol per name
    specs = {n: state_spec(mb, v.shape) if i in pairs else
             mb.TensorSpec(shape=mil_shape(boundary.model_shape(v), symbols),
                           dtype=boundary.mil_type(v, True))
             for i, (n, v) in enumerate(zip(in_names, graph.inputs))}
    ctx = MilCtx(mb, opset)
    with Function(specs, opset_version=opset) as func:
        args = [mb.read_state(input=func.inputs[n]) if i in pairs else
                boundary.enter(ctx, v, func.inputs[n])
                for i, (n, v) in enumerate(zip(in_names, graph.inputs))]
        read_symbols(ctx, graph, [func.inputs[n] for n in in_names])
        outs = interpret(graph, SymbolicRules(MIL_RULES), args, ctx, backend="coreml")
        for i, o in pairs.items():          # a state's new value is written, not returned
            mb.coreml_update_state(state=func.inputs[in_names[i]], value=outs[o],
                                   name=f"{in_names[i]}_update")   # (a name of its own:
            # coremltools' canonicalize_inplace_pattern pass rebuilds it with the default one)
        kept = [o for o in range(len(out_names)) if o not in pairs.values()]
        taken = {id(var) for var in func.inputs.values()}
        func.set_outputs([boundary.leave(ctx, graph.outputs[o], outs[o], out_names[o], taken)
                          for o in kept])
    prog = Program()
    prog.add_function("main", func)
    return MilProgram(prog, opset, in_names, [out_names[o] for o in kept], boundary)
