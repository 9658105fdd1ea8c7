"""Random well-typed JAX programs from a seed.

Each op is drawn from the table in `ops_*.py`, applied eagerly with JAX to the values built so far
(so its output aval is JAX's own and every guard sees real numbers) and kept only if it is well
conditioned:

- float magnitudes stay below `Config.max_abs` (f16: `max_abs_f16`), so no comparison hinges on
  catastrophic cancellation or overflow in one backend only; inf/NaN from log, sqrt, division by
  zero are kept and compared as such;
- integer values stay below 2**20 (no overflow), integer divisors are nonzero;
- a discrete op (comparison, floor/round/sign, argmax/argsort, float->int or ->bool cast) on an
  inexact float (one produced by float arithmetic, whose last bits may differ between backends)
  is kept only if every element is far from the decision boundary; exact values (inputs, and
  what shape ops, min/max, casts and integer ops make of them) need no margin.

The same seed always gives the same program: every choice comes from one
`numpy.random.Generator`, and argument values come from per-input seeds drawn from it.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .program import FLOATS, Input, Op, Program

ALL_DTYPES = ("float32", "float16", "int32", "bool")
DTYPE_WEIGHTS = (0.5, 0.15, 0.2, 0.15)


@dataclasses.dataclass
class Config:
    """Generator knobs. The defaults are the CLI's except grad_fraction (CLI: 0.3)."""
    min_ops: int = 3
    max_ops: int = 25
    max_rank: int = 4
    max_dim: int = 5
    zero_dim_prob: float = 0.03     # chance that a drawn dimension is 0
    special_prob: float = 0.05      # chance that a float input holds NaN/inf/-0.0 entries
    one_dim_prob: float = 0.2
    grad_fraction: float = 0.0      # share of programs wrapped in jax.grad
    max_abs: float = 1e4            # float32 values beyond this are ill-conditioned
    max_abs_f16: float = 300.0
    # Op names never drawn, e.g. ("conv1d", "conv2d") while a backend dies on them; and
    # `conv_zero_size=False` keeps every conv operand free of size-0 dimensions. Float->int
    # casts of NaN and infinities are generated (XLA: NaN -> 0, saturating).
    exclude: tuple = ()
    conv_zero_size: bool = True


@dataclasses.dataclass
class Val:
    shape: tuple
    dtype: str
    exact: bool


class Reject(Exception):
    """The drawn op does not fit (wrong operands, ill-conditioned values): draw another."""


class Ctx:
    """What an op generator sees: the rng, the avals so far, ways to make new inputs, and
    `check`s on values, which run once the whole program has been evaluated (see generate)."""

    def __init__(self, rng, config):
        self.r, self.config = rng, config
        self.vals, self.n_inputs, self.pending, self.checks = {}, 0, [], []

    # ---- drawing shapes and dtypes
    def dim(self, allow_zero=True):
        u = self.r.random()
        if allow_zero and u < self.config.zero_dim_prob:
            return 0
        if u < self.config.zero_dim_prob + self.config.one_dim_prob:
            return 1
        return int(self.r.integers(2, self.config.max_dim + 1))

    def shape(self, rank=None, allow_zero=True):
        rank = int(self.r.integers(0, self.config.max_rank + 1)) if rank is None else rank
        return tuple(self.dim(allow_zero) for _ in range(rank))

    def dtype(self, among=ALL_DTYPES):
        w = np.array([DTYPE_WEIGHTS[ALL_DTYPES.index(d)] for d in among])
        return str(among[self.r.choice(len(among), p=w / w.sum())])

    def choice(self, seq):
        return seq[int(self.r.integers(0, len(seq)))]

    # ---- values
    def new_input(self, shape, dtype, kind="normal"):
        if kind in ("normal", "finite") and dtype in FLOATS and \
                self.r.random() < self.config.special_prob and kind == "normal":
            kind = "special"
        name = f"x{self.n_inputs + len(self.pending)}"
        inp = Input(name, tuple(int(d) for d in shape), dtype, kind,
                    int(self.r.integers(0, 2**31)))
        self.pending.append(inp)
        self.vals[name] = Val(inp.shape, dtype, True)
        return name

    def pick(self, pred=lambda v: True, fresh=0.1):
        """An existing value satisfying `pred`, recent ones likelier; None (or, with probability
        `fresh`, None anyway) so the caller makes a new input."""
        names = [n for n, v in self.vals.items() if pred(v)]
        if not names or self.r.random() < fresh:
            return None
        w = np.arange(1, len(names) + 1, dtype=np.float64) ** 2
        return names[self.r.choice(len(names), p=w / w.sum())]

    def operand(self, dtypes=ALL_DTYPES, pred=lambda v: True, rank=None, kind="normal",
                allow_zero=True):
        name = self.pick(lambda v: v.dtype in dtypes and pred(v)
                         and (rank is None or len(v.shape) == rank)
                         and (allow_zero or 0 not in v.shape))
        if name is None:
            for _ in range(20):
                shape = self.shape(rank, allow_zero)
                if pred(Val(shape, dtypes[0], True)):
                    return self.new_input(shape, self.dtype(dtypes), kind)
            raise Reject("no operand")
        return name

    def v(self, name):
        return self.vals[name]

    # ---- checks on values, run after evaluation: check(data) raises Reject
    def check(self, fn):
        self.checks.append(fn)

    def margin(self, name):
        return 5e-2 if self.v(name).dtype == "float16" else 1e-3

    def _loose_margin(self, name):
        """The margin of a float value that is not exact; None otherwise (nothing to check)."""
        v = self.v(name)
        if v.exact or v.dtype not in FLOATS:
            return None
        return self.margin(name)

    def far_from(self, name, boundaries):
        """Unless `name` is exact: each element must be farther than the margin from the nearest
        point of `boundaries(x)` (an array like x)."""
        m = self._loose_margin(name)
        if m is None:
            return

        def check(data):
            x = data[name].astype(np.float64)
            fin = np.isfinite(x)
            with np.errstate(invalid="ignore"):
                gap = np.abs(x - boundaries(x))[fin]
            if np.any(gap <= m * np.maximum(1.0, np.abs(x[fin]))):
                raise Reject("near a decision boundary")
        self.check(check)

    def distinct(self, name, axis=None):
        """Unless `name` is exact: its values along `axis` must be pairwise well apart."""
        m = self._loose_margin(name)
        if m is None:
            return

        def check(data):
            x = data[name].astype(np.float64)
            x = np.sort(x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1), axis=-1)
            with np.errstate(invalid="ignore"):
                gaps = np.diff(x, axis=-1)
            ok = ~np.isfinite(gaps) | (gaps > m * np.maximum(1.0, np.abs(x[..., 1:])))
            if not np.all(ok):
                raise Reject("near ties")
        self.check(check)


def _magnitude(val, data, config):
    if val.dtype in FLOATS:
        a = data.astype(np.float64)
        limit = config.max_abs_f16 if val.dtype == "float16" else config.max_abs
        if np.any(np.abs(a[np.isfinite(a)]) > limit):
            raise Reject("too large")
    elif val.dtype == "int32" and data.size and np.max(np.abs(data.astype(np.int64))) > 2**20:
        raise Reject("integer too large")


SCOPE = {"jnp": jnp, "lax": lax, "jax": jax, "np": np}


def _aval(template, args, ctx):
    """The op's result aval, by tracing it alone (jax.eval_shape: no compile)."""
    def one(*xs):
        return eval(template.format(*args), {**SCOPE, **dict(zip(args, xs))})  # noqa: S307
    specs = [jax.ShapeDtypeStruct(ctx.vals[n].shape, ctx.vals[n].dtype) for n in args]
    out = jax.eval_shape(one, *specs)
    if not isinstance(out, jax.ShapeDtypeStruct) or str(out.dtype) not in ALL_DTYPES:
        raise Reject(f"unexpected result {out}")
    return tuple(out.shape), str(out.dtype)


def evaluate_all(prog):
    """Every op's value (name -> numpy array), from one jax.jit of the whole program."""
    everything = dataclasses.replace(prog, outputs=[o.name for o in prog.ops], grad=None)
    _, f, args = everything.build()
    outs = jax.jit(f)(*args)
    return {**{i.name: a for i, a in zip(prog.inputs, args)},
            **{o.name: np.asarray(v) for o, v in zip(prog.ops, outs)}}


def _draw(seed, config):
    """Phase 1: the op list, typed by tracing; value checks collected per op."""
    from .ops import OPS
    r = np.random.default_rng(seed)
    ctx = Ctx(r, config)
    table = [(name, fam, w, fn) for name, (fam, w, fn) in OPS.items()
             if name not in config.exclude]
    weights = np.array([w for _, _, w, _ in table], dtype=np.float64)
    n_ops = int(r.integers(config.min_ops, config.max_ops + 1))
    inputs = []
    for _ in range(2):                    # a couple of starting inputs
        ctx.new_input(ctx.shape(), ctx.dtype())
    inputs, ctx.pending, ctx.n_inputs = list(ctx.pending), [], 2
    ops, checks, tries = [], {}, 0
    while len(ops) < n_ops and tries < 40 * n_ops:
        tries += 1
        name, fam, _, fn = table[r.choice(len(table), p=weights / weights.sum())]
        snapshot = dict(ctx.vals)
        try:
            template, args, exact = fn(ctx)
            shape, dtype = _aval(template, args, ctx)
        except (Reject, TypeError, ValueError, IndexError, ZeroDivisionError):
            ctx.vals, ctx.pending, ctx.checks = snapshot, [], []
            continue
        out = f"v{len(ops)}"
        ctx.vals[out] = Val(shape, dtype, bool(exact))
        inputs += ctx.pending
        ctx.n_inputs += len(ctx.pending)
        checks[out], ctx.pending, ctx.checks = ctx.checks, [], []
        ops.append(Op(out, name, fam, template, list(args)))
    used = {a for o in ops for a in o.args}
    outputs = [o.name for o in ops if o.name not in used] or [ops[-1].name]
    return Program(inputs=inputs, ops=ops, outputs=outputs, seed=seed).dce(), checks, r


def generate(seed, config=None):
    """The program of `seed` (deterministic). Phase 2 evaluates it once and replaces every op
    whose value fails a check (too large, near a boundary) by a new input of the same aval,
    until none fails."""
    config = config or Config()
    prog, checks, r = _draw(seed, config)
    for _ in range(8):
        data = evaluate_all(prog)
        bad = []
        for o in prog.ops:
            try:
                _magnitude(Val(None, str(data[o.name].dtype), False), data[o.name], config)
                for c in checks.get(o.name, ()):
                    c(data)
            except KeyError:              # an operand was itself replaced by an (exact) input
                pass
            except Reject:
                bad.append(o.name)
        if not bad:
            break
        avals = prog.avals()
        for name in bad:
            if any(o.name == name for o in prog.ops):
                prog = prog.cut(name, int(r.integers(0, 2**31)), avals=avals)
        if not prog.ops:
            return generate(int(r.integers(0, 2**31)), config)
    else:
        return generate(int(r.integers(0, 2**31)), config)
    if r.random() < config.grad_fraction:
        prog.grad = _grad_spec(prog, r)
    prog.seed = seed
    from .oracle import reference
    try:                                  # also caches JAX's results for the runner
        reference(prog, config, data)
    except Exception:                     # noqa: BLE001 (no usable gradient: plain program)
        prog.grad = None
        reference(prog, config, data)
    return prog


def _grad_spec(prog, r):
    """Gradient of the sum of one float output w.r.t. the float inputs it depends on."""
    avals = prog.avals()
    floats = [k for k, n in enumerate(prog.outputs) if avals[n][1] in FLOATS]
    if not floats:
        return None
    k = int(floats[r.integers(0, len(floats))])
    deps = prog.depends_on(prog.outputs[k])
    wrt = [i.name for i in prog.inputs if i.dtype in FLOATS and i.name in deps]
    return {"output": k, "wrt": wrt} if wrt else None
