"""The RLX IR: values with a shape (ints, or jax.export's symbolic dimensions: ir/dims.py) and a
dtype, nodes, graphs, a builder, a verifier, a printer."""
import itertools

import numpy as np

from ..errors import IRTypeError, SymbolicShapeError
from .ops import OpKind
from . import prng
from .dims import prod, shape_of, symbolic_shape

_ids = itertools.count()


def dtype_name(dt):
    dt = np.dtype(dt)
    if prng.is_key(dt):
        return prng.dtype_name(dt)
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
            "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
            "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool"}.get(dt.name, dt.name)


class Value:
    """One SSA value: shape (ints or symbolic dimensions), dtype, and the node producing it."""
    __slots__ = ("id", "shape", "dtype", "node", "index")

    def __init__(self, shape, dtype, node=None, index=0):
        self.id = next(_ids)
        self.shape = shape_of(shape)
        self.dtype = np.dtype(dtype)
        self.node = node
        self.index = index

    def __getstate__(self):
        return self.shape, self.dtype, self.node, self.index

    def __setstate__(self, state):
        """An unpickled value (a cached pattern graph) takes a fresh id of this process."""
        self.id = next(_ids)
        self.shape, self.dtype, self.node, self.index = state

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return prod(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def type_str(self):
        return f"{dtype_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self):
        return f"Value#{self.id}:{self.type_str()}"


def _fmt_attr(v):
    if isinstance(v, np.ndarray):
        if v.size <= 4:
            return np.array2string(v, separator=",").replace("\n", "")
        return f"<{dtype_name(v.dtype)}{list(v.shape)}>"
    if isinstance(v, np.dtype):
        return dtype_name(v)
    return str(v)


class Node:
    """One operation: kind, operand values, plain attributes, output values, user source line,
    and regions: the sub-graphs of control flow, kept apart from the hashable attributes (a
    region's Inputs are its parameters; nothing in it refers to an outer value)."""
    __slots__ = ("kind", "inputs", "attrs", "outputs", "src", "regions")
    kind: OpKind

    def __init__(self, kind, inputs, attrs, src=None, regions=()):
        self.kind = kind
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs)
        self.outputs = ()
        self.src = src
        self.regions = tuple(regions)

    @property
    def out(self):
        """The single output (most nodes have one)."""
        assert len(self.outputs) == 1, self
        return self.outputs[0]

    def walk(self):
        """This node, then every node of its regions (nested ones too)."""
        yield self
        for r in self.regions:
            yield from r.walk()

    def attr_text(self) -> str:
        items = [f"{k}={_fmt_attr(v)}" for k, v in self.attrs.items()]
        return f"[{', '.join(items)}]" if items else ""

    def text(self, names=None):
        names = names or (lambda v: f"%{v.id}")
        outs = " ".join(f"{names(o)}:{o.type_str()}" for o in self.outputs)
        ins = " ".join(names(i) for i in self.inputs)
        return f"{outs} = {self.kind.name}{self.attr_text()} {ins}".rstrip()

    def __repr__(self):
        return self.text() + (f"  # {self.src}" if self.src else "")


class Graph:
    """An SSA program; control flow nests graphs as node regions. Input nodes carry attrs
    index=position in the flat inputs."""

    def __init__(self, name="main"):
        self.name = name
        self.nodes = []
        self.inputs = []
        self.outputs = []
        # names of the flat inputs/outputs after the user's pytree paths (set by rlx_jax.jit)
        self.input_names = None
        self.output_names = None

    def like(self):
        """An empty graph with this one's name and input/output names (for rewriting passes)."""
        g = Graph(self.name)
        g.input_names, g.output_names = self.input_names, self.output_names
        return g

    def walk(self):
        """Every node, regions' nodes included (each region's nodes right after its node)."""
        for n in self.nodes:
            yield n
            for r in n.regions:
                yield from r.walk()

    def op_counts(self, include_boundary=False) -> dict[str, int]:
        """OpKind name -> count, over regions too."""
        counts: dict[str, int] = {}
        for n in self.walk():
            if not include_boundary and n.kind in (OpKind.Input, OpKind.Constant):
                continue
            counts[n.kind.name] = counts.get(n.kind.name, 0) + 1
        return dict(sorted(counts.items()))

    def readers(self):
        """{value id: the nodes of this graph (not its regions) reading the value}."""
        out = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v.id, []).append(n)
        return out

    def kinds(self):
        return {n.kind for n in self.walk()}

    def namer(self):
        table = {}

        def name(v):
            if v.id not in table:
                i, s = len(table), ""
                while True:
                    s = chr(ord("a") + i % 26) + s
                    i = i // 26 - 1
                    if i < 0:
                        break
                table[v.id] = s
            return table[v.id]
        return name

    def as_text(self, name=None, indent="", src=True) -> str:
        """jaxpr-like text, one node a line with its source line (unless `src` is False);
        regions as nested blocks."""
        name = name or self.namer()
        ins = " ".join(f"{name(v)}:{v.type_str()}" for v in self.inputs)
        lines = [f"{{ lambda ; {ins} . let"]
        for n in self.nodes:
            if n.kind is OpKind.Input:
                continue
            line = f"{indent}    " + n.text(name)
            if n.src and src:
                line = f"{line:<64}  # {n.src}"
            lines.append(line)
            for i, r in enumerate(n.regions):
                lines.append(f"{indent}      region {i} " + r.as_text(name, indent + "      ", src))
        lines.append(f"{indent}  in ({', '.join(name(v) for v in self.outputs)}) }}")
        return "\n".join(lines)

    __str__ = as_text

    def verify(self, types=True):
        """Checks SSA order (every operand is defined before use; outputs are defined) and, with
        `types`, that every node's output types are those its kind's reference semantics give
        (ir/reference.py, evaluated abstractly and memoised per signature)."""
        from . import shapes
        defined = set()
        for n in self.nodes:
            for r in n.regions:
                r.verify(types)
            for v in n.inputs:
                if v.id not in defined:
                    raise IRTypeError(f"operand {v!r} of `{n!r}` is used before it is defined")
            for o in n.outputs:
                if o.node is not n:
                    raise IRTypeError(f"output {o!r} of `{n!r}` does not point back to its node")
                defined.add(o.id)
            if types and n.kind is not OpKind.Input:
                want = [(o.shape, o.dtype) for o in n.outputs]
                if n.kind is OpKind.Constant:
                    value = n.attrs["value"]
                    got = [(tuple(value.shape), value.dtype)]
                else:
                    got = shapes.infer(n)
                if got != want:
                    raise IRTypeError(f"`{n!r}` has output types {want}; its kind's reference "
                                      f"semantics give {got}")
        for v in self.outputs:
            if v.id not in defined:
                raise IRTypeError(f"graph output {v!r} is not defined by any node")
        return self


class Builder:
    """Appends nodes to a graph, inferring output shape/dtype per kind (ir.shapes)."""

    def __init__(self, graph=None, src=None):
        self.graph = graph if graph is not None else Graph()
        self.src = src

    def input(self, shape, dtype):
        v = self.add(OpKind.Input, (), {"index": len(self.graph.inputs)}, out=[(shape, dtype)])
        self.graph.inputs.append(v)
        return v

    def add(self, kind, inputs, attrs=None, out=None, regions=()):
        """Adds a node; `out` is a list of (shape, dtype), inferred when omitted.

        Returns the output Value, or a tuple of them for a multi-output node.
        """
        from . import shapes
        node = Node(kind, inputs, attrs or {}, self.src, regions)
        if out is None:
            out = shapes.infer(node)
        node.outputs = tuple(Value(s, d, node, i) for i, (s, d) in enumerate(out))
        self.graph.nodes.append(node)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    # ---- helpers used by frontend rules and decompositions ----
    def const(self, value, dtype=None):
        arr = np.asarray(value, dtype=dtype)
        return self.add(OpKind.Constant, (), {"value": arr}, out=[(arr.shape, arr.dtype)])

    def scalar(self, value, like):
        return self.const(np.asarray(value, dtype=like.dtype))

    def unary(self, fn, x, **attrs):
        return self.add(OpKind.Activation, (x,), {"fn": fn, **attrs})

    def binary(self, fn, x, y):
        return self.add(OpKind.Binary, (x, y), {"fn": fn})

    def compare(self, fn, x, y):
        return self.add(OpKind.Compare, (x, y), {"fn": fn})

    def where(self, pred, x, y):
        return self.add(OpKind.Where, (pred, x, y))

    # The data-movement helpers below state their (obvious) output type after checking the
    # operands, instead of running shape inference: frontends emit thousands of them.
    def cast(self, x, dtype):
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        return self.add(OpKind.Cast, (x,), {"dtype": dtype}, out=[(x.shape, dtype)])

    def reshape(self, x, shape):
        shape = shape_of(shape)
        if shape == x.shape:
            return x
        size = prod(shape)
        if size != x.size or any(d < 0 for d in shape):
            if symbolic_shape(shape) or symbolic_shape(x.shape):
                raise SymbolicShapeError(
                    f"reshape of {x.type_str()} to [{', '.join(map(str, shape))}] needs "
                    f"{x.size} == {size}, which JAX cannot prove for every size of the "
                    f"symbolic dimensions (it holds for some only); declare the dimension so "
                    f"that it does (e.g. '2*k' instead of 't' when t must be even) or give it "
                    f"a static size")
            raise IRTypeError(f"cannot reshape {x.type_str()} to {list(shape)}")
        return self.add(OpKind.Reshape, (x,), {"shape": shape}, out=[(shape, x.dtype)])

    def transpose(self, x, perm):
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(x.ndim)):
            return x
        if sorted(perm) != list(range(x.ndim)):
            raise IRTypeError(f"transpose of {x.type_str()} by {perm}: not a permutation")
        return self.add(OpKind.Transpose, (x,), {"perm": perm},
                        out=[(tuple(x.shape[p] for p in perm), x.dtype)])

    def expand(self, x, shape, dims=None):
        """Broadcast `x` to `shape`; `dims` maps x's axes to output axes (default: trailing)."""
        shape = shape_of(shape)
        if dims is None:
            dims = tuple(range(len(shape) - x.ndim, len(shape)))
        dims = tuple(int(d) for d in dims)
        if shape == x.shape and dims == tuple(range(x.ndim)):
            return x
        if (len(dims) != x.ndim or list(dims) != sorted(set(dims))
                or any(not 0 <= d < len(shape) or x.shape[i] not in (1, shape[d])
                       for i, d in enumerate(dims))):
            raise IRTypeError(f"cannot broadcast {x.type_str()} to {list(shape)} along {dims}")
        return self.add(OpKind.Expand, (x,), {"shape": shape, "dims": dims},
                        out=[(shape, x.dtype)])

    def reduce(self, fn, x, axes, keepdims=False):
        axes = tuple(sorted(a % x.ndim for a in axes))
        r = self.add(OpKind.Reduce, (x,), {"fn": fn, "axes": axes})
        if keepdims:
            r = self.reshape(r, [1 if i in axes else d for i, d in enumerate(x.shape)])
        return r

    def dot_general(self, x, y, contracting, batch=((), ()), preferred=None):
        dn = ((tuple(contracting[0]), tuple(contracting[1])), (tuple(batch[0]), tuple(batch[1])))
        return self.add(OpKind.DotGeneral, (x, y), {"dimension_numbers": dn,
                                                     "preferred_element_type": preferred})
