"""The optax update formulas recognised as one node per group of parameter leaves
(passes/recognize_optim.py): each is the installed optax's own code for one leaf, followed by
`optax.apply_updates`, traced with its hyperparameters as pattern variables (marker values).

`OPTIMIZERS` lists them: the node kind, its references (with a fixed learning rate, and with
a learning-rate schedule, whose step size -schedule(count) is then an operand the program
computes), the leaf's state inputs in the node's operand order, and the node's attributes
from the bound hyperparameters.

- AdamUpdate (ir/reference_optim.py): `optax.adam`, `optax.adamw` (mask=None).
- LionUpdate (ir/reference_optim.py): `optax.lion` (mode "hard", mask=None; weight_decay 1e-3
  by default, 0 skipped by optax).

Both take an optional `mu_dtype` (the first moment stored in another float dtype).
"""
import numpy as np

from ..ir.ops import OpKind as K
from .patterns import Reference

# marker values distinct from each other and from 1 - b1, 1 - b2 in float16 and bfloat16 too
MARKERS = {"nlr": 0.0173, "b1": 0.8765, "b2": 0.98765, "eps": 3.21e-7}
WD_MARKER = {"wd": 0.0345}                      # adamw's and lion's weight_decay
F32, BF16, F16 = (np.dtype(d) for d in ("float32", "bfloat16", "float16"))
# (parameter dtype, mu dtype) of the templates: optax's leaves, with mu_dtype or without
DTYPES = ((F32, F32), (BF16, BF16), (F16, F16), (F32, BF16), (F32, F16), (BF16, F32),
          (F16, F32))


def _mu_dtype(p, mu):
    return None if mu.dtype == p.dtype else mu.dtype


def _apply(parts, p, g, leaves, step=None):
    """(p', the first transformation's state after the update) of optax.chain(*parts) over
    one leaf whose state's leaves are `leaves` (with `step`, the chain ends with a schedule
    whose step size it is, and whose count is appended)."""
    import jax
    import optax
    if step is not None:
        parts = parts + [optax.scale_by_schedule(lambda _: step)]
        leaves = list(leaves) + [leaves[0]]
    opt = optax.chain(*parts)
    state = jax.tree.unflatten(jax.tree.structure(opt.init(p)), list(leaves))
    updates, state = opt.update(g, state, p)
    return optax.apply_updates(p, updates), state[0]


def _adam_leaf(p, g, mu, nu, count, *step, nlr=None, b1, b2, eps, wd=None):
    """One leaf of optax.adam(-nlr, b1, b2, eps) (optax.adamw(..., weight_decay=wd) when wd is
    given; mu_dtype: mu's dtype where it is not p's; the step size `step` in place of -nlr
    under a schedule) + apply_updates: (p', mu', nu', count')."""
    import optax
    parts = [optax.scale_by_adam(b1=b1, b2=b2, eps=eps, mu_dtype=_mu_dtype(p, mu))]
    if wd is not None:
        parts.append(optax.add_decayed_weights(wd))
    if not step:
        parts.append(optax.scale_by_learning_rate(-nlr))
    new_p, adam = _apply(parts, p, g, [count, mu, nu], *step)
    return new_p, adam.mu, adam.nu, adam.count


def _lion_leaf(p, g, mu, *step, nlr=None, b1, b2, wd=None):
    """One leaf of optax.lion(-nlr, b1, b2, weight_decay=wd) (weight_decay=0, which optax
    skips, when wd is not given; mu_dtype: mu's dtype where it is not p's; the step size
    `step` in place of -nlr under a schedule) + apply_updates: (p', mu'). Lion's count enters
    no formula (its increment stays primitives)."""
    import jax.numpy as jnp
    import optax
    parts = [optax.scale_by_lion(b1=b1, b2=b2, mu_dtype=_mu_dtype(p, mu))]
    if wd is not None:
        parts.append(optax.add_decayed_weights(wd))
    if not step:
        parts.append(optax.scale_by_learning_rate(-nlr))
    new_p, lion = _apply(parts, p, g, [jnp.zeros([], jnp.int32), mu], *step)
    return new_p, lion.mu


def _example(states, counted, scheduled):
    def example(rank):
        leaf = ((3,) * rank, np.float32)
        out = {"p": leaf, "g": leaf, **{s: leaf for s in states}}
        if counted:
            out["count"] = ((), np.int32)
        if scheduled:
            out["step"] = ((), np.float32)
        return out
    return example


def _references(name, fn, states, params, trigger, counted=True):
    """The reference of `fn` with a fixed learning rate, and under a schedule."""
    return tuple(
        Reference(f"{name}{'(schedule)' if sched else ''} + optax.apply_updates", fn,
                  ("p", "g") + states + (("count",) if counted else ()) +
                  (("step",) if sched else ()),
                  _example(states, counted, sched), ranks=(1,), trigger=trigger,
                  params={k: v for k, v in params.items() if not (sched and k == "nlr")})
        for sched in (False, True))


class Optimizer:
    """One recognised optimizer: its node kind, references, per-leaf state names (operand
    order after p and g; the first is mu, which may have its own dtype), whether the node
    takes the state's count (first operand) and yields count' (first result), and
    attrs(params, scheduled) -> the node's attributes."""

    def __init__(self, kind, refs, states, attrs, counted=True):
        self.kind, self.refs, self.states, self.attrs = kind, refs, states, attrs
        self.counted = counted


def _adam_attrs(p, scheduled):
    return {"lr": None if scheduled else -p["nlr"], "b1": p["b1"], "b2": p["b2"],
            "eps": p["eps"], "eps_root": 0.0, "weight_decay": p.get("wd", 0.0)}


def _lion_attrs(p, scheduled):
    return {"lr": None if scheduled else -p["nlr"], "b1": p["b1"], "b2": p["b2"],
            "weight_decay": p.get("wd", 0.0)}


_ADAM_TRIGGER = {(K.Activation, "sqrt"), (K.Binary, "pow")}
_LION_TRIGGER = {(K.Activation, "sign")}
_LION = {k: v for k, v in MARKERS.items() if k != "eps"}
OPTIMIZERS = (
    Optimizer(K.AdamUpdate, _references("optax.adam", _adam_leaf, ("mu", "nu"), MARKERS,
                                        _ADAM_TRIGGER) +
              _references("optax.adamw", _adam_leaf, ("mu", "nu"), MARKERS | WD_MARKER,
                          _ADAM_TRIGGER), ("mu", "nu"), _adam_attrs),
    Optimizer(K.LionUpdate, _references("optax.lion", _lion_leaf, ("mu",), _LION | WD_MARKER,
                                        _LION_TRIGGER, counted=False) +
              _references("optax.lion(weight_decay=0)", _lion_leaf, ("mu",), _LION,
                          _LION_TRIGGER, counted=False), ("mu",), _lion_attrs, counted=False),
)
