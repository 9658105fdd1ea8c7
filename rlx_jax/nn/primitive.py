"""One helper that turns a jnp reference implementation into a JAX primitive and its IR kind.

`define(name, impl, kind=...)` is the one place a primitive is defined: it registers the impl
(eager), abstract evaluation (jax.eval_shape of the impl), the MLIR lowering
(`mlir.lower_fun(impl)`, so the primitive runs under plain `jax.jit`), a batching rule and a JVP
rule, and, on the IR side, the kind the frontend translates it to and that kind's reference
semantics (`ir.reference.REFERENCE[kind] = impl`). `differentiable(...)` adds the autodiff
structure legalization expects (docs/nn.md): the forward's JVP emits a LINEAR primitive whose transpose binds the
backward primitives, so `jax.grad` yields exactly one backward op per backward kind.

Parameters of every primitive are exactly the attributes of its IR kind (docs/high-level-kinds.md)
unless `attrs(params, operands)` says otherwise.
"""
import functools

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.typing import ArrayLike

from ..ir.ops import PRIMITIVE
from ..ir.reference import reference
from ..numpy_rules import with_own_numpy_rules

PRIMITIVES: dict[str, "Prim"] = {}     # primitive name -> Prim


def _is_float(x):
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _zero_like(x):
    return ad.Zero(jax.core.get_aval(x).to_tangent_aval())


class Prim:
    """A JAX primitive defined by its jnp reference `impl(*operands, **params)`.

    `rows`: operand indices that may carry extra leading (row) dimensions (or a function of the
    params returning them); when only those are batched and every output carries them too, vmap
    binds the same primitive with the batch axis in front. Otherwise vmap falls back to the
    reference implementation.

    `kind`: the IR kind the frontend translates the primitive to, with attributes
    `attrs(params, operands)` (default: the params). `impl` becomes the kind's reference
    semantics, unless the kind is a primitive kind, whose reference is ir/reference.py's. Without
    a kind (the linear `*_jvp` primitives) the frontend inlines `impl`. `impl` is rlx_jax's
    own code: it runs under JAX's default numpy rules wherever it runs (numpy_rules.py).
    """

    def __init__(self, name, impl, *, kind=None, attrs=None, multiple_results=False, rows=None,
                 jvp=None):
        if name in PRIMITIVES:
            raise KeyError(f"duplicate rlx primitive {name}")
        impl = with_own_numpy_rules(impl)
        self.name, self.impl, self.rows = name, impl, rows
        self.kind, self.attrs = kind, attrs or (lambda params, operands: dict(params))
        if kind is not None and kind not in PRIMITIVE:
            reference(kind)(impl)
        self._jitted, self._shapes = {}, {}
        self.p = p = Primitive(name)
        p.multiple_results = multiple_results
        p.def_impl(self._eager)
        p.def_abstract_eval(self._abstract)
        mlir.register_lowering(p, mlir.lower_fun(self._lower_impl, multiple_results))
        batching.primitive_batchers[p] = self._batch
        ad.primitive_jvps[p] = jvp or self._jnp_jvp
        PRIMITIVES[name] = self

    def __repr__(self):
        return f"Prim({self.name})"

    def bind(self, *args, **params):
        return self.p.bind(*args, **params)

    def _lower_impl(self, *args, **params):
        out = self.impl(*args, **params)
        return list(out) if self.p.multiple_results else out

    def _eager(self, *args, **params):
        key = tuple(sorted(params.items()))
        fn = self._jitted.get(key)
        if fn is None:
            fn = self._jitted[key] = jax.jit(functools.partial(self._lower_impl, **params))
        return fn(*args)

    def _abstract(self, *avals, **params):
        key = (tuple(sorted(params.items())), tuple((a.shape, a.dtype) for a in avals))
        out = self._shapes.get(key)
        if out is None:
            structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
            out = self._shapes[key] = jax.eval_shape(functools.partial(self.impl, **params),
                                                     *structs)
        if self.p.multiple_results:
            return [jax.core.ShapedArray(o.shape, o.dtype) for o in out]
        return jax.core.ShapedArray(out.shape, out.dtype)

    def _batch(self, args, dims, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        n_out = None
        rows = self.rows(params) if callable(self.rows) else self.rows
        if rows is not None and all(d is None or i in rows for i, d in enumerate(dims)):
            moved = [batching.bdim_at_front(a, d, size) if i in rows else a
                     for i, (a, d) in enumerate(zip(args, dims))]
            out = self.bind(*moved, **params)
            n_out = len(out) if self.p.multiple_results else None
        else:
            f = functools.partial(self.impl, **params)
            out = jax.vmap(f, in_axes=tuple(dims))(*args)
            if self.p.multiple_results:
                out, n_out = list(out), len(out)
        return (out, [0] * n_out) if n_out is not None else (out, 0)

    def _jnp_jvp(self, primals, tangents, **params):
        """JVP from the reference impl (used by backward primitives: second derivatives)."""
        out = self.bind(*primals, **params)
        t = jnp_tangent(self.impl, primals, tangents, range(len(primals)), params)
        if t is None:
            t = ([_zero_like(o) for o in out] if self.p.multiple_results else _zero_like(out))
        return out, t


def jnp_tangent(impl, primals, tangents, which, params):
    """Tangent of impl(*primals) along the non-zero float tangents at indices `which`, or None."""
    idx = [i for i in which if type(tangents[i]) is not ad.Zero and _is_float(primals[i])]
    if not idx:
        return None

    def f(*vary):
        args = list(primals)
        for i, v in zip(idx, vary):
            args[i] = v
        return impl(*args, **params)
    _, t = jax.jvp(f, tuple(primals[i] for i in idx), tuple(tangents[i] for i in idx))
    return t


def define(name, impl, **kw):
    return Prim(name, impl, **kw)


def differentiable(name, impl, *, kind, linear, backward, rows=None, attrs=None):
    """A forward primitive whose tangent in operands `linear` is one linear primitive.

    `backward(ct, primals, need, **params)` returns one cotangent per linear operand present
    (None where `need` is False), binding the backward primitives. Tangents of any other float
    operand (rope's cos/sin, an additive attention mask) come from the reference impl's JVP.
    The linear primitive `<name>_jvp` takes (*primals, *tangents) with param `n_primals`.
    """
    fwd = Prim(name, impl, kind=kind, attrs=attrs, rows=rows)

    def lin_of(n):
        return tuple(i for i in linear if i < n)

    def lin_impl(*args, n_primals, **params):
        primals, tans = list(args[:n_primals]), args[n_primals:]
        idx = lin_of(n_primals)

        def f(*vary):
            a = list(primals)
            for i, v in zip(idx, vary):
                a[i] = v
            return impl(*a, **params)
        return jax.jvp(f, tuple(primals[i] for i in idx), tuple(tans))[1]

    def lin_rows(params):
        n = params["n_primals"]
        return None if rows is None else tuple(rows) + tuple(
            n + j for j, i in enumerate(lin_of(n)) if i in rows)
    lin = Prim(name + "_jvp", lin_impl, rows=lin_rows)

    def transpose(ct, *args, n_primals, **params):
        primals, tans = args[:n_primals], args[n_primals:]
        if any(ad.is_undefined_primal(p) for p in primals):
            raise NotImplementedError(f"{name}: transpose with respect to a non-linear operand")
        need = [ad.is_undefined_primal(t) for t in tans]
        cts = [None] * len(tans)
        if type(ct) is not ad.Zero:
            cts = backward(ct, primals, need, **params)
        return [None] * n_primals + [c if nd else None for c, nd in zip(cts, need)]
    ad.primitive_transposes[lin.p] = transpose

    def jvp(primals, tangents, **params):
        out = fwd.bind(*primals, **params)
        idx = lin_of(len(primals))
        total = None
        lt = [tangents[i] for i in idx]
        if any(type(t) is not ad.Zero for t in lt):
            lt = [ad.instantiate_zeros(t) for t in lt]
            total = lin.bind(*primals, *lt, n_primals=len(primals), **params)
        other = [i for i in range(len(primals)) if i not in idx]
        extra = jnp_tangent(impl, primals, tangents, other, params)
        if extra is not None:
            total = extra if total is None else total + extra
        return out, (_zero_like(out) if total is None else total)
    ad.primitive_jvps[fwd.p] = jvp
    fwd.lin = lin
    return fwd


def promote(*xs: ArrayLike) -> list[jax.Array]:
    """Float operands of one op as arrays of their common dtype (the IR kinds take one dtype)."""
    arrays = [jnp.asarray(x) for x in xs]
    dt = jnp.result_type(*arrays)
    return [x.astype(dt) for x in arrays]
