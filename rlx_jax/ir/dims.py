"""Dimensions of the RLX IR: an int, or a symbolic dimension expression of `jax.export`
(`jax.export.symbolic_shape("b, t")`: JAX's own arithmetic, comparisons and constraints;
rlx_jax writes no symbolic algebra of its own).

A graph with symbolic dimensions is traced once; `instantiate` gives the static graph of one
concrete size (every value's shape and every shape-carrying attribute evaluated), which the
backends lower. `bind` solves a call's concrete shapes for the symbols and checks them against
the declared constraints before anything runs.
"""
import numpy as np

from ..jax_internals import module

_poly = module("shape_poly")
DimExpr = _poly._DimExpr
InconclusiveDimensionOperation = _poly.InconclusiveDimensionOperation


def is_symbolic(d):
    return isinstance(d, DimExpr)


def dim(d):
    """`d` as an IR dimension: an int, or the symbolic expression it is (a constant expression
    becomes its int)."""
    if isinstance(d, DimExpr):
        return int(d) if d._is_constant else d
    return int(d)


def shape_of(shape):
    return tuple(dim(d) for d in shape)


def symbolic_shape(shape):
    """Whether any dimension of `shape` is symbolic."""
    return any(isinstance(d, DimExpr) for d in shape)


def prod(ds):
    """The product of dimensions: an int, or a symbolic expression."""
    out = 1
    for d in ds:
        out = out * d
    return dim(out)


def plain_symbol(d):
    """The symbol's name when dimension `d` is exactly one symbol (not an expression)."""
    if not isinstance(d, DimExpr):
        return None
    names = d._get_vars()
    if len(names) == 1:
        (name,) = names
        if DimExpr._from_var(name, d.scope) == d:
            return name
    return None


def symbols(dims):
    """The names of the symbols in an iterable of dimensions."""
    out = set()
    for d in dims:
        if isinstance(d, DimExpr):
            out.update(d._get_vars())
    return out


def constraints(shapes):
    """The explicit constraints (jax.export's `Constraint`s: cmp, e1, e2, debug_str) of the
    scope of the symbolic dimensions in `shapes` (one scope per trace), [] when none is
    symbolic."""
    for shape in shapes:
        for d in shape:
            if isinstance(d, DimExpr):
                return list(d.scope._explicit_constraints)
    return []


def evaluate(d, env):
    """Dimension `d` at the concrete sizes `env` (symbol name -> int)."""
    if isinstance(d, DimExpr):
        return int(d._evaluate(env))
    return d


def substitute(x, env):
    """`x` (an attribute: tuples, lists, dicts, numpy values, dtypes, ...) with every symbolic
    dimension in it evaluated at `env`."""
    if isinstance(x, DimExpr):
        return int(x._evaluate(env))
    if type(x) is tuple:
        return tuple(substitute(i, env) for i in x)
    if type(x) is list:
        return [substitute(i, env) for i in x]
    if type(x) is dict:
        return {k: substitute(v, env) for k, v in x.items()}
    if isinstance(x, np.ndarray) and x.dtype == object:
        return np.array([substitute(i, env) for i in x.ravel()]).reshape(x.shape)
    return x


def mentions_symbol(x):
    """Whether attribute `x` holds a symbolic dimension anywhere."""
    if isinstance(x, DimExpr):
        return not x._is_constant
    if isinstance(x, (tuple, list)):
        return any(mentions_symbol(i) for i in x)
    if isinstance(x, dict):
        return any(mentions_symbol(v) for v in x.values())
    if isinstance(x, np.ndarray) and x.dtype == object:
        return any(mentions_symbol(i) for i in x.ravel())
    return False
