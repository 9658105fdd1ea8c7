"""jaxpr -> RLX IR Graph.

Inlines call-like primitives (jit, closed_call, call, custom_jvp_call, custom_vjp_call,
remat2 = jax.checkpoint), turns literals and closed-over arrays into Constants, records the
user's file:line on every node, removes dead code, and collects every unsupported primitive
before raising once. With `host` (jit's fallback="host"), a primitive with no rule becomes a
HostPrimitive node unless it is refused (no_rule). `translate` emits a jaxpr into an existing
Builder (for rules and decompositions written as jnp functions).
"""
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from ..errors import RlxError, UnsupportedDtypeError, UnsupportedPrimitiveError
from ..ir import prng
from ..ir.graph import Builder, Graph, Value
from ..ir.host import HostParams
from ..ir.ops import OpKind
from ..ir.rewrite import dce
from ..jax_internals import module
from ..numpy_rules import with_own_numpy_rules
from ..nesting import tracing
from .rules import JAXPR_RULES, REFUSED, UNSUPPORTED


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
source_info_util = module("source_info")
source_info_util.register_exclusion(_PKG_DIR)

# call-like primitives and the param holding their body
CALL_PARAMS = {
    "jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat2": "jaxpr",
    "composite": "jaxpr",      # lax.composite: its decomposition is its meaning
}


def source_line(eqn):
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return f"{os.path.basename(frame.file_name)}:{frame.start_line} ({frame.function_name})"


class EqnContext:
    """What a JAXPR_RULES rule sees: the builder, the eqn and its output types, and ways to
    translate a sub-jaxpr in place or to record the eqn as unsupported."""
    __slots__ = ("b", "eqn", "src", "_tracer")

    def __init__(self, tracer, eqn, src):
        self.b = tracer.b
        self.eqn = eqn
        self.src = src
        self._tracer = tracer

    def translate(self, closed, operands):
        """Translates ClosedJaxpr `closed` on `operands` in place of this eqn; its nodes keep
        this eqn's source line where they have no user line of their own."""
        return self._tracer.inline(closed, operands, self.src)

    def unsupported(self, reason):
        """Records this eqn as unsupported (raised with every other one at the end of the
        trace) and returns stand-ins for its outputs."""
        return self._tracer.unsupported(self.eqn, self.src, reason)

    @property
    def out_avals(self):
        return [(v.aval.shape, _plain_dtype(v.aval)) for v in self.eqn.outvars]

    def emit(self, kind, inputs, regions=(), **attrs):
        """Adds the node producing this eqn's outputs (types taken from the jaxpr)."""
        return self.b.add(kind, inputs, attrs, out=self.out_avals, regions=regions)

    def region(self, closed):
        """ClosedJaxpr `closed` translated into a region: a Graph of its own (own constants and
        literals) whose Inputs are the jaxpr's invars."""
        return self._tracer.region(closed, self.src)

    def keep_on_host(self, inputs, why):
        """This eqn kept as it is (a HostPrimitive: run as JAX on the host) when the trace
        keeps such ops (jit's fallback="host"), else recorded as unsupported with `why`; for a
        rule that declines some of its primitive's params (a reason that names them)."""
        if not (self._tracer.host and _plain(self.eqn)):
            if _plain(self.eqn):
                self._tracer.hostable.add(self.eqn.primitive.name)
            return self.unsupported(why)
        out = self.emit(OpKind.HostPrimitive, inputs, primitive=self.eqn.primitive,
                        params=HostParams(self.eqn.params, why, self.eqn.effects))
        return [out] if isinstance(out, Value) else list(out)


def _eqn_text(eqn, limit=200):
    """The eqn as one line of text (nested jaxprs flattened), cut at `limit` characters."""
    text = " ".join(str(eqn).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _plain_dtype(aval):
    """The aval's IR dtype (ir/prng.py: the key dtype of its implementation for a PRNG key)."""
    return prng.dtype_of(aval.dtype)


def _plain(eqn):
    """Whether every operand and result of `eqn` has an array dtype (no PRNG key)."""
    return not any(prng.is_key(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))


def no_rule(eqn):
    """(why, runnable) for an eqn whose primitive has no rule: the reason shown, and whether it
    may be kept as a HostPrimitive (bound as JAX binds it, ir/host.py) with fallback="host".
    Refused: the primitives in REFUSED, and unlisted ones whose eqn has effects."""
    name = eqn.primitive.name
    if name in UNSUPPORTED:
        return UNSUPPORTED[name], name not in REFUSED
    if eqn.effects:
        kinds = ", ".join(sorted({type(e).__name__ for e in eqn.effects}))
        return (f"no rlx_jax rule for JAX primitive {name}, and it has effects ({kinds}), which "
                f"host segments do not keep; call it outside rlx_jax.jit"), False
    return f"no rlx_jax rule for JAX primitive {name}", True


def foreign_dtype(aval):
    """The dtype of `aval` when it is a custom element type (jax.dtypes.extended) that is not a
    PRNG key, the IR having no representation of it, else None."""
    dt = getattr(aval, "dtype", None)
    if dt is None or isinstance(dt, np.dtype) or prng.is_key(dt):
        return None
    return dt if jax.dtypes.issubdtype(dt, jax.dtypes.extended) else None


def refuse_foreign(aval, what, src=None):
    dt = foreign_dtype(aval)
    if dt is not None:
        raise UnsupportedDtypeError(
            f"{what} has dtype {dt}, a custom element type (jax.dtypes.extended) that is not "
            f"one of JAX's PRNG keys" + (f", at {src}" if src else "") + ": rlx_jax's IR holds "
            f"numeric dtypes and PRNG keys only. Pass and compute its physical array (the "
            f"array its dtype's rules lower it to) instead, or run this part with jax.jit")


def _placeholder(aval):
    """A stand-in value for an unsupported eqn's output."""
    return Value(aval.shape, _plain_dtype(aval))


class _Tracer:
    def __init__(self, b=None, host=False):
        self.b = b if b is not None else Builder(Graph())
        self.host = host       # keep primitives with no rule as HostPrimitive nodes (no_rule)
        self.missing = {}   # primitive name -> [count, first eqn text, reason, source line]
        self.hostable = set()  # names in `missing` that fallback="host" would keep
        self.literals = {}
        self.call_src = None   # source line of the innermost enclosing call-like eqn

    def literal(self, val, aval):
        arr = np.asarray(val, dtype=aval.dtype)
        key = (arr.tobytes(), arr.dtype.str, arr.shape)
        if key not in self.literals:
            self.b.src = None
            self.literals[key] = self.b.const(arr)
        return self.literals[key]

    def read(self, env, atom):
        if isinstance(atom, jcore.Literal):
            return self.literal(atom.val, atom.aval)
        return env[atom]

    def run(self, jaxpr, consts, args):
        env = {}
        for var, c in zip(jaxpr.constvars, consts):
            refuse_foreign(var.aval, f"a constant the function closes over ({type(c).__name__})")
            env[var] = c if isinstance(c, Value) else self._const(c)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            invals = [self.read(env, a) for a in eqn.invars]
            outs = self.eqn(eqn, invals)
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [self.read(env, a) for a in jaxpr.outvars]

    def _const(self, c):
        self.b.src = None
        dtype = getattr(c, "dtype", None)
        if dtype is not None and prng.is_key(dtype):
            return self.b.add(OpKind.RandomWrap, (self.b.const(np.asarray(prng.unwrap(c))),),
                              {"key_dtype": prng.dtype_of(dtype)})
        return self.b.const(np.asarray(c))

    def inline(self, body, invals, src):
        """Translates `body` (a Jaxpr or ClosedJaxpr) on `invals`, its lines defaulting to src."""
        outer, self.call_src = self.call_src, src
        try:
            if isinstance(body, jcore.ClosedJaxpr):
                return self.run(body.jaxpr, body.consts, list(invals))
            return self.run(body, [], list(invals))
        finally:
            self.call_src = outer

    def region(self, closed, src):
        sub = _Tracer(host=self.host)
        sub.call_src = src
        args = [sub.b.input(v.aval.shape, _plain_dtype(v.aval)) for v in closed.jaxpr.invars]
        sub.b.graph.outputs = sub.run(closed.jaxpr, closed.consts, args)
        for name, (count, text, why, where) in sub.missing.items():
            entry = self.missing.setdefault(name, [0, text, why, where])
            entry[0] += count
        self.hostable |= sub.hostable
        return dce(sub.b.graph)

    def unsupported(self, eqn, src, reason):
        name = eqn.primitive.name
        entry = self.missing.setdefault(name, [0, _eqn_text(eqn), reason, src])
        entry[0] += 1
        return [_placeholder(v.aval) for v in eqn.outvars]

    def eqn(self, eqn, invals):
        name = eqn.primitive.name
        src = source_line(eqn) or self.call_src
        for v in eqn.outvars:
            if not isinstance(getattr(v.aval, "dtype", None), np.dtype):
                refuse_foreign(v.aval, f"the result of `{_eqn_text(eqn)}`", src)
        if name in CALL_PARAMS and CALL_PARAMS[name] in eqn.params:
            return self.inline(eqn.params[CALL_PARAMS[name]], invals, src)
        rule = JAXPR_RULES.get(name)
        if rule is None:
            why, runnable = no_rule(eqn)
            runnable = runnable and _plain(eqn)
            if self.host and runnable:
                self.b.src = src
                out = EqnContext(self, eqn, src).emit(
                    OpKind.HostPrimitive, invals, primitive=eqn.primitive,
                    params=HostParams(eqn.params, why, eqn.effects))
                return [out] if isinstance(out, Value) else list(out)
            if runnable:
                self.hostable.add(name)
            return self.unsupported(eqn, src, why)
        self.b.src = src
        try:
            out = rule(EqnContext(self, eqn, src), *invals, **eqn.params)
        except RlxError as e:
            e.args = (f"{e.args[0] if e.args else e}\n  in `{_eqn_text(eqn)}`"
                      + (f" at {src}" if src else ""),)
            raise
        except Exception as e:  # noqa: BLE001 - a failing rule names the eqn and the line
            raise UnsupportedPrimitiveError(
                f"the frontend rule for `{name}` failed: {type(e).__name__}: {e}\n"
                f"  in `{_eqn_text(eqn)}`" + (f" at {src}" if src else "")
                + "\n  Rewrite this op with other jnp/lax ops, or file a frontend rule.") from e
        if isinstance(out, Value):
            out = [out]
        return list(out)

    def raise_missing(self):
        if not self.missing:
            return
        host = sorted(n for n in self.missing if n in self.hostable and not self.host)
        lines = []
        for name, (count, text, why, src) in sorted(self.missing.items()):
            lines.append(f"  {name} ×{count} ({why})\n      {text}"
                         + (f"\n      at {src}" if src else ""))
        raise UnsupportedPrimitiveError(
            f"{len(self.missing)} unsupported JAX primitive(s) in the traced program:\n"
            + "\n".join(lines)
            + "\nRewrite these parts with supported jnp/lax ops or rlx_jax.nn ops, run them "
              "outside rlx_jax.jit, or file a frontend rule."
            + (f"\n{', '.join(host)} run as JAX on the host with fallback='host' (the "
               f"default)." if host else ""))


def translate(closed_jaxpr, b, operands):
    """Emits `closed_jaxpr` into Builder `b` on `operands` (values of b's graph) and returns its
    output values; unsupported primitives raise one UnsupportedPrimitiveError."""
    t = _Tracer(b)
    outs = t.run(closed_jaxpr.jaxpr, closed_jaxpr.consts, list(operands))
    t.raise_missing()
    return outs


def boundary_input(b, aval):
    """The graph Input for a jaxpr invar: typed PRNG keys cross the graph boundary as their
    physical data (uint32[..., *key_shape], wrapped right after the Input), every other value
    as is."""
    refuse_foreign(aval, f"an argument of type {aval.str_short()}")
    if prng.is_key(aval.dtype):
        data = b.input(prng.physical_shape(aval.shape, prng.dtype_of(aval.dtype)), np.uint32)
        prng.mark_key_data(data)
        return b.add(OpKind.RandomWrap, (data,), {"key_dtype": prng.dtype_of(aval.dtype)})
    return b.input(aval.shape, aval.dtype)


@with_own_numpy_rules
def graph_from_jaxpr(closed_jaxpr, name="main", host=True):
    """Translates a ClosedJaxpr into an IR Graph (one Input per jaxpr invar). Typed PRNG keys
    enter and leave it as their uint32 data (boundary_input; key results are unwrapped). With
    `host`, primitives with no rule become HostPrimitive nodes (ir/host.py: run as JAX on the
    host) instead of being refused, except those no_rule refuses."""
    t = _Tracer(host=host)
    t.b.graph.name = name
    args = [boundary_input(t.b, v.aval) for v in closed_jaxpr.jaxpr.invars]
    outs = t.run(closed_jaxpr.jaxpr, closed_jaxpr.consts, args)
    t.raise_missing()
    t.b.src = None
    t.b.graph.outputs = [t.b.add(OpKind.RandomUnwrap, (o,)) if prng.is_key(o.dtype) else o
                         for o in outs]
    return dce(t.b.graph).verify()


def trace(fun: Callable[..., Any], *args: Any, static_argnums: int | Sequence[int] = (),
          **kwargs: Any) -> Graph:
    """Traces `fun(*args, **kwargs)` and returns its RLX IR Graph (inputs: flattened leaves)."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    with tracing():             # an rlx_jax.jit function traced here is inlined
        closed = jax.make_jaxpr(fun, static_argnums=static_argnums)(*args, **kwargs)
    return graph_from_jaxpr(closed, name=getattr(fun, "__name__", "main"))
