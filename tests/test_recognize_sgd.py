"""optax's SGD step with momentum recognised as SgdMomentumUpdate (passes/recognize_sgd.py): one
node per group of leaves (plain and nesterov, a constant learning rate or a schedule as an
operand), values against jax.jit on every backend over several steps, the MIL op counts, and
the near misses that stay primitives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.passes.recognize import recognize

optax = pytest.importorskip("optax")
R = np.random.RandomState(0)
P = {"w": R.randn(3, 4).astype(np.float32), "b": R.randn(4).astype(np.float32),
     "s": np.asarray(0.5, np.float32)}
SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 0.1, 3, 30)
OPTS = {
    "momentum": optax.sgd(0.1, momentum=0.9),
    "nesterov": optax.sgd(0.05, momentum=0.8, nesterov=True),
    "schedule": optax.sgd(SCHEDULE, momentum=0.9),
    "schedule_nesterov": optax.sgd(SCHEDULE, momentum=0.9, nesterov=True),
}
SCHEDULE_OPS = {"Activation": 2, "Binary": 19, "Cast": 2, "Compare": 2, "Where": 2}  # its count


def _step(opt):
    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s
    return step


def _grads(seed):
    r = np.random.RandomState(seed)
    return {k: np.asarray(r.randn(*v.shape) * 0.1, np.float32) for k, v in P.items()}


def _counts(opt):
    return recognize(rlx_jax.trace(_step(opt), P, opt.init(P), _grads(1))).op_counts()


@pytest.mark.parametrize("name", sorted(OPTS))
def test_every_leaf_in_one_node(name):
    """Given: optax.sgd(lr or a schedule, momentum[, nesterov]) + apply_updates over 3 leaves
       Result: one SgdMomentumUpdate (p' and the trace of every leaf); a schedule stays
               primitives (its count, its step size -schedule(count), the node's operand)"""
    want = {"SgdMomentumUpdate": 1, **(SCHEDULE_OPS if "schedule" in name else {})}
    assert _counts(OPTS[name]) == want


@pytest.mark.parametrize("name", ["momentum", "nesterov", "schedule"])
def test_steps_equal_jax(name, backend):
    opt = OPTS[name]
    fast = rlx_jax.jit(_step(opt), backend=backend)
    assert (fast.lower(P, opt.init(P), _grads(0)).op_counts().get("SgdMomentumUpdate") == 1) \
        == (backend != "xla")                      # xla decomposes it
    want = got = (P, opt.init(P))
    for seed in range(3):
        g = _grads(seed)
        want, got = jax.jit(_step(opt))(*want, g), fast(*got, g)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7), got, want)


def test_training_step_with_gradients(backend):
    """value_and_grad of a small regression, then the sgd update: one node on the device."""
    x = R.randn(8, 3).astype(np.float32)
    opt = optax.sgd(0.1, momentum=0.9, nesterov=True)

    def train(p, s, x):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"]) ** 2))(p)
        u, s = opt.update(g, s, p)
        return loss, optax.apply_updates(p, u), s
    args = ({k: P[k] for k in "wb"}, opt.init({k: P[k] for k in "wb"}), x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5,
                                                         atol=1e-6),
                 rlx_jax.jit(train, backend=backend)(*args), jax.jit(train)(*args))


def test_core_ml_mil_ops():
    """Given: the momentum and nesterov steps over 3 leaves (one of rank 0) on coreml
       Result: 4 MIL ops a leaf (mul, add, mul, add), 6 with nesterov, as many as without
               recognition (the rank-0 leaf's values reshaped on the way in and out)"""
    for name, per_leaf in (("momentum", 2), ("nesterov", 3)):
        opt = OPTS[name]
        ops = [rlx_jax.jit(_step(opt), backend="coreml", recognize=rec).lower(
            P, opt.init(P), _grads(0)).op_counts("backend") for rec in (True, False)]
        assert ops[0] == ops[1] == {"mul": 3 * per_leaf, "add": 3 * per_leaf, "reshape": 5}


NEAR_MISSES = {   # name -> a step that is not optax's formula: left as it is
    "no momentum": lambda p, t, g: (jax.tree.map(lambda p, g: p - 0.1 * g, p, g), t),
    "trace not kept": lambda p, t, g: (jax.tree.map(lambda p, g, t: p + -0.1 * (g + 0.9 * t),
                                                    p, g, t), t),
    "dampened": lambda p, t, g: (lambda nt: (jax.tree.map(lambda p, t: p + -0.1 * t, p, nt),
                                             nt))(
        jax.tree.map(lambda g, t: 0.5 * g + 0.9 * t, g, t)),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_stay_primitives(name):
    fn = NEAR_MISSES[name]
    assert "SgdMomentumUpdate" not in recognize(
        rlx_jax.trace(fn, P, _grads(2), _grads(1))).op_counts()
