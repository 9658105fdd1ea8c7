"""A fuzz program: a few input specs, a straight list of op records, the outputs, an optional grad.

Each op record holds a Python expression template (`"jnp.sum({0}, axis=(1,))"`) over the names of
earlier values, so one `source()` text is both what runs and the reproducer that is printed: the
oracle executes exactly the code a reader sees. Records are plain data (JSON round-trips) so a
program can be sent to a worker process and shrunk by editing lists.
"""
import dataclasses
import json
import re
from typing import Optional

import numpy as np

DTYPES = ("float32", "float16", "int32", "bool")
FLOATS = ("float32", "float16")
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0])
TIES = np.array([-1.5, -0.0, 0.0, 0.5, 0.5, 2.0, 2.0, np.inf, -np.inf, np.nan])
HEADER = ("import jax, jax.numpy as jnp, numpy as np\n"
          "from jax import lax\n")


@dataclasses.dataclass
class Input:
    """A program argument: its aval and how its values are drawn (`kind`, `seed`)."""
    name: str
    shape: tuple
    dtype: str
    # normal | finite | positive | special | ties | index:<n> | unique:<n>
    kind: str = "normal"
    seed: int = 0

    def value(self):
        """The argument's values, drawn from its own seed, so they do not depend on the program."""
        r = np.random.default_rng(self.seed)
        shape, size = tuple(self.shape), int(np.prod(self.shape, dtype=np.int64))
        if self.kind.startswith("unique:"):        # distinct in-range indices (scatter .set)
            n = int(self.kind.split(":")[1])
            a = r.permutation(n)[:size] - r.integers(0, 2) * n
        elif self.kind.startswith("index:"):       # in-range indices, negative ones included
            n = int(self.kind.split(":")[1])
            a = r.integers(-n, n, size) if n else np.zeros(size)
        elif self.dtype == "bool":
            a = r.random(size) > 0.5
        elif self.dtype == "int32":
            a = r.integers(-5, 6, size)
        elif self.kind == "ties":                  # few distinct values: ties, +-0, inf, NaN
            a = r.choice(TIES, size)
        elif self.kind == "positive":
            a = r.uniform(0.25, 3.0, size)
        else:
            a = r.uniform(-3.0, 3.0, size)
            if self.kind == "special" and size:     # NaN, infinities and signed zeros
                k = int(r.integers(1, min(size, 3) + 1))
                a[r.choice(size, k, replace=False)] = r.choice(SPECIAL, k)
        return np.asarray(a).astype(self.dtype).reshape(shape)


@dataclasses.dataclass
class Op:
    """One line `name = template.format(*args)`; `family` groups ops for the summary and the
    tolerance table (see oracle.py)."""
    name: str
    op: str                     # e.g. "sum", "conv1d", "scatter_add"
    family: str                 # unary | transcendental | binary | compare | reduce | shape | ...
    template: str
    args: list

    def line(self):
        return f"{self.name} = " + self.template.format(*self.args)


@dataclasses.dataclass
class Program:
    inputs: list
    ops: list
    outputs: list
    grad: Optional[dict] = None     # {"output": k, "wrt": [input name, ...]}
    seed: Optional[int] = None      # the seed it was generated from (for the report)

    def families(self):
        return sorted({o.family for o in self.ops})

    def source(self):
        """The program as Python: `f` (the ops) and `fn` (what is jitted: f or its gradient)."""
        params = ", ".join(i.name for i in self.inputs)
        body = "".join(f"    {o.line()}\n" for o in self.ops)
        outs = "".join(f"{n}, " for n in self.outputs)
        text = HEADER + f"\n\ndef f({params}):\n{body}    return ({outs})\n"
        if self.grad:
            k = self.grad["output"]
            argnums = tuple(i for i, x in enumerate(self.inputs) if x.name in self.grad["wrt"])
            text += (f"\n\ndef loss(*a):\n    return jnp.sum(f(*a)[{k}])\n\n\n"
                     f"fn = jax.grad(loss, argnums={argnums})\n")
        else:
            text += "\n\nfn = f\n"
        return text

    def build(self):
        """(fn, f, args): the jitted function, the plain op function, the argument arrays."""
        scope = {}
        exec(compile(self.source(), "<fuzz program>", "exec"), scope)   # noqa: S102 (own text)
        return scope["fn"], scope["f"], tuple(i.value() for i in self.inputs)

    def reproducer(self, backend, options=None):
        """A self-contained script: the program, literal argument values, the two runs compared."""
        lines = ["import rlx_jax", self.source().rstrip(), ""]
        for i in self.inputs:
            v = i.value()
            values = re.sub(r"\b(nan|inf)\b", r"np.\1", repr(v.tolist()))
            lines.append(f"{i.name} = np.array({values}, dtype=np.{i.dtype})"
                         f".reshape({tuple(i.shape)!r})")
        args = "".join(f"{i.name}, " for i in self.inputs)
        opts = "".join(f", {k}={v!r}" for k, v in sorted((options or {}).items()))
        lines += [f"args = ({args})",
                  "want = jax.tree.leaves(jax.jit(fn)(*args))",
                  f"got = jax.tree.leaves(rlx_jax.jit(fn, backend={backend!r}{opts})(*args))",
                  "for w, g in zip(want, got):",
                  "    print(np.asarray(g).dtype, w.dtype, np.asarray(g).shape, w.shape)",
                  "    np.testing.assert_allclose(np.asarray(g, np.float64), "
                  "np.asarray(w, np.float64), rtol=1e-5, atol=1e-5)"]
        return "\n".join(lines) + "\n"

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def from_json(text):
        d = json.loads(text)
        return Program(inputs=[Input(**{**i, "shape": tuple(i["shape"])}) for i in d["inputs"]],
                       ops=[Op(**o) for o in d["ops"]], outputs=d["outputs"], grad=d["grad"],
                       seed=d.get("seed"))

    def copy(self):
        return Program.from_json(self.to_json())

    # ---- edits (generation repairs and shrinking); each returns a new, well-formed program
    def avals(self):
        """name -> (shape, dtype) of every input and op, by tracing (no compile)."""
        import jax
        everything = dataclasses.replace(self, outputs=[o.name for o in self.ops], grad=None)
        _, f, args = everything.build()
        outs = jax.eval_shape(f, *args)
        return {**{i.name: (tuple(i.shape), i.dtype) for i in self.inputs},
                **{o.name: (tuple(v.shape), str(v.dtype)) for o, v in zip(self.ops, outs)}}

    def depends_on(self, name):
        """Names of every value `name` is computed from (itself included)."""
        by_name, deps, stack = {o.name: o for o in self.ops}, set(), [name]
        while stack:
            n = stack.pop()
            if n not in deps:
                deps.add(n)
                stack += by_name[n].args if n in by_name else []
        return deps

    def dce(self):
        """Drops ops and inputs no output needs; a gradient with nothing left to differentiate
        is dropped too."""
        p = self.copy()
        live = set().union(*(p.depends_on(n) for n in p.outputs))
        p.ops = [o for o in p.ops if o.name in live]
        p.inputs = [i for i in p.inputs if i.name in live]
        if p.grad:
            out = p.outputs[p.grad["output"]] if p.grad["output"] < len(p.outputs) else None
            wrt = [w for w in p.grad["wrt"] if out and w in p.depends_on(out)]
            p.grad = {"output": p.grad["output"], "wrt": wrt} if wrt else None
        return p

    def rename(self, old, new):
        p = self.copy()
        for o in p.ops:
            o.args = [new if a == old else a for a in o.args]
        p.outputs = [new if n == old else n for n in p.outputs]
        if p.grad:
            p.grad["wrt"] = [new if n == old else n for n in p.grad["wrt"]]
        return p

    def cut(self, name, seed, kind="normal", avals=None):
        """Op `name` replaced by a new input of the same aval (so the rest stays well typed)."""
        shape, dtype = (avals or self.avals())[name]
        fresh = f"x{1 + max([-1] + [int(i.name[1:]) for i in self.inputs])}"
        p = self.rename(name, fresh)
        p.ops = [o for o in p.ops if o.name != name]
        p.inputs.append(Input(fresh, shape, dtype, kind, seed))
        return p.dce()

    def with_outputs(self, keep):
        """Only the outputs at positions `keep`; a gradient follows its output or is dropped."""
        p = self.copy()
        p.outputs = [self.outputs[k] for k in keep]
        if p.grad:
            k = p.grad["output"]
            p.grad = {"output": keep.index(k), "wrt": p.grad["wrt"]} if k in keep else None
        return p.dce()
