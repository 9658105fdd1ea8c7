"""optax's Adam step recognised as AdamUpdate (passes/recognize_optim.py): structure (one node
per group of leaves), numerics against jax.jit on every backend over several steps, Core ML's
batched update, and the near misses that must stay primitives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.recognize import recognize

from .optax_cases import single_node_equals_reference

optax = pytest.importorskip("optax")
BACKENDS = [b for b in ("xla", "mlx", "coreml") if b in rlx_jax.available_backends()]
RTOL, ATOL = 1e-5, 1e-6     # Adam divides by sqrt(nu): float32 rounding of g² shows there


def _params(seed=0, big=False):
    r = np.random.default_rng(seed)
    p = {"w": r.normal(size=(3, 4)), "b": r.normal(size=4), "s": np.asarray(0.5),
         "k": r.normal(size=(2, 3, 2))}
    if big:                                   # above Core ML's batching limit
        p["big"] = r.normal(size=(300, 256))
    return {k: np.asarray(v, np.float32) for k, v in p.items()}


def _step(opt):
    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s
    return step


def _grads(p, seed):
    r = np.random.default_rng(seed)
    return {k: (r.normal(size=v.shape) * 0.1).astype(np.float32) for k, v in p.items()}


def _steps_equal_jax(opt, backend, p, s, seeds):
    """One step per gradient seed through rlx_jax and jax.jit, equal after each."""
    fast = rlx_jax.jit(_step(opt), backend=backend)
    want = got = (p, s)
    for seed in seeds:
        g = _grads(p, seed)
        want, got = jax.jit(_step(opt))(*want, g), fast(*got, g)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL), got, want)


def _counts(fn, *args):
    return recognize(rlx_jax.trace(fn, *args)).op_counts()


def test_adam_step_over_every_leaf_is_one_node():
    """Given:  optax.adam(1e-3).update + apply_updates over 4 leaves (ranks 0 to 3)
       Result: the whole step is one AdamUpdate node (p', mu', nu' of every leaf and count')"""
    opt = optax.adam(1e-3)
    p = _params()
    s = opt.init(p)
    assert _counts(_step(opt), p, s, _grads(p, 1)) == {"AdamUpdate": 1}
    for backend in set(BACKENDS) - {"xla"}:       # backends that would keep the node
        off = rlx_jax.jit(_step(opt), backend=backend, recognize=False).lower(p, s, _grads(p, 1))
        assert "AdamUpdate" not in off.op_counts() and off.op_counts().get("Binary", 0) > 40


def test_hyperparameters_are_read_back_as_written():
    opt = optax.adam(3e-4, b1=0.8, b2=0.99, eps=1e-6)
    p = _params()
    graph = recognize(rlx_jax.trace(_step(opt), p, opt.init(p), _grads(p, 1)))
    node = next(n for n in graph.nodes if n.kind is K.AdamUpdate)
    assert node.attrs == {"lr": 3e-4, "b1": 0.8, "b2": 0.99, "eps": 1e-6, "eps_root": 0.0,
                          "weight_decay": 0.0}
    assert len(node.inputs) == 1 + 4 * 4 and len(node.outputs) == 1 + 3 * 4


def test_two_optimizers_are_two_groups():
    """Given:  two Adam states (different learning rates) in one program
       Result: one AdamUpdate per optimizer"""
    fast, slow = optax.adam(1e-2), optax.adam(1e-4)
    p, q = _params(0), _params(1)

    def both(p, q, sp, sq, g):
        return _step(fast)(p, sp, g), _step(slow)(q, sq, g)
    assert _counts(both, p, q, fast.init(p), slow.init(q), _grads(p, 2)) == {"AdamUpdate": 2}


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_steps_equal_jax(backend):
    """Given:  three Adam steps (the count and bias corrections move), a leaf above Core ML's
               batching limit among small ones
       Result: parameters, moments and count equal jax.jit's at rtol 1e-5 / atol 1e-6"""
    opt = optax.adam(3e-3, b1=0.8, b2=0.99, eps=1e-6)
    step = _step(opt)
    fast = rlx_jax.jit(step, backend=backend)
    p = _params(big=True)
    s = opt.init(p)
    counts = fast.lower(p, s, _grads(p, 0)).op_counts()
    assert (counts == {"AdamUpdate": 1}) == (backend != "xla")   # xla decomposes it
    want = got = (p, s)
    for i in range(3):
        g = _grads(p, 10 + i)
        want, got = jax.jit(step)(*want, g), fast(*got, g)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL), got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_node_matches_reference(backend):
    """AdamUpdate alone, native (mlx, coreml) or decomposed (xla), against its reference."""
    r = np.random.RandomState(0)
    shapes = [(3, 4), (5,), ()]
    leaves = [r.uniform(-1, 1, s).astype(np.float32) for _ in range(3) for s in shapes] + \
        [r.uniform(0, 1, s).astype(np.float32) for s in shapes]
    args = [np.asarray(6, np.int32)] + leaves
    attrs = dict(lr=0.01, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=0.0)
    single_node_equals_reference(K.AdamUpdate, args, attrs, backend, rtol=RTOL, atol=ATOL)


@pytest.mark.skipif("coreml" not in rlx_jax.available_backends(), reason="no coremltools")
def test_coreml_updates_small_leaves_in_one_batch():
    """Given:  4 small leaves and one of 76,800 elements (above BATCH_ELEMENTS)
       Result: one 14-op chain for the small leaves (a concat per operand, a split per
               result) and one for the large leaf: 2 sqrt, 4 concat, 3 split"""
    opt = optax.adam(1e-3)
    p = _params(big=True)
    mil = rlx_jax.jit(_step(opt), backend="coreml").lower(p, opt.init(p), _grads(p, 0)) \
        .op_counts(level="backend")
    assert (mil["sqrt"], mil["concat"], mil["split"]) == (2, 4, 3)


NEAR_MISSES = {
    # eps_root > 0 adds it inside the square root
    "eps_root": lambda: optax.adam(1e-3, eps_root=1e-8),
    # more digits than float32 holds: 1 - b1 in optax is not 1 - float32(b1)
    "b1_digits": lambda: optax.adam(1e-3, b1=0.91234567891),
    # no bias correction
    "sgd_momentum": lambda: optax.sgd(1e-3, momentum=0.9),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_stay_primitives_and_equal_jax(name):
    opt = NEAR_MISSES[name]()
    p = _params()
    s, g = opt.init(p), _grads(p, 3)
    assert "AdamUpdate" not in _counts(_step(opt), p, s, g)
    got = rlx_jax.jit(_step(opt), backend="mlx" if "mlx" in BACKENDS else "xla")(p, s, g)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL), got, jax.jit(_step(opt))(p, s, g))


def test_adam_after_value_and_grad_reads_the_gradients():
    """Given:  value_and_grad of a small loss, then Adam
       Result: one AdamUpdate whose gradient operands are the gradient subgraph's results;
               equal to jax.jit on mlx"""
    opt = optax.adam(1e-2)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def train(p, s):
        loss, g = jax.value_and_grad(lambda p: jnp.sum(jnp.tanh(x @ p["w"] + p["b"]) ** 2))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    p = {"w": np.ones((3, 2), np.float32) * 0.3, "b": np.zeros(2, np.float32)}
    s = opt.init(p)
    assert _counts(train, p, s).get("AdamUpdate") == 1
    backend = "mlx" if "mlx" in BACKENDS else "xla"
    got, want = rlx_jax.jit(train, backend=backend)(p, s), jax.jit(train)(p, s)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL), got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_in_a_training_loop_body(backend):
    """Given:  five Adam steps in lax.fori_loop (the update sits in the Scan's region)
       Result: one AdamUpdate inside the region; results equal jax.jit's"""
    opt = optax.adam(1e-2)
    x = np.linspace(0.1, 1.3, 12, dtype=np.float32).reshape(4, 3)

    def train(p, s):
        def body(i, carry):
            p, s = carry
            g = jax.grad(lambda p: jnp.sum(jnp.tanh(x @ p["w"] + p["b"]) ** 2))(p)
            u, s = opt.update(g, s, p)
            return optax.apply_updates(p, u), s
        return jax.lax.fori_loop(0, 5, body, (p, s))
    p = {"w": np.full((3, 2), 0.3, np.float32), "b": np.asarray([0.1, -0.2], np.float32)}
    s = opt.init(p)
    lowered = rlx_jax.jit(train, backend=backend).lower(p, s)
    inner = [m.kind for n in lowered.legalized.nodes for m in n.walk() if m is not n]
    assert inner.count(K.AdamUpdate) == (1 if backend != "xla" else 0)
    got, want = rlx_jax.jit(train, backend=backend)(p, s), jax.jit(train)(p, s)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL), got, want)


ADAMW = {
    "adamw": (lambda: optax.adamw(2e-3, weight_decay=1e-2), [0.01]),
    # the mask leaves the bias undecayed: its leaf is plain Adam, a group of its own
    "adamw_mask": (lambda: optax.adamw(2e-3, weight_decay=1e-2,
                                       mask=lambda p: {k: k != "b" for k in p}), [0.0, 0.01]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ADAMW))
def test_adamw_is_adam_with_weight_decay(name, backend):
    """Given:  optax.adamw (weight decay added to the direction before the learning rate),
               with and without a mask
       Result: AdamUpdate nodes with weight_decay (0.0 for the masked-out leaves); two steps
               equal jax.jit's"""
    make, decays = ADAMW[name]
    opt = make()
    p = _params()
    s = opt.init(p)
    graph = recognize(rlx_jax.trace(_step(opt), p, s, _grads(p, 0)))
    nodes = [n for n in graph.nodes if n.kind is K.AdamUpdate]
    assert sorted(n.attrs["weight_decay"] for n in nodes) == decays
    assert graph.op_counts() == {"AdamUpdate": len(decays)}
    _steps_equal_jax(opt, backend, p, s, seeds=(20, 21))


SCHEDULES = {
    "adamw_warmup_cosine": lambda: optax.adamw(
        optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10), weight_decay=1e-2),
    "adam_linear": lambda: optax.adam(optax.linear_schedule(1e-3, 1e-4, 10)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_a_learning_rate_schedule_is_an_operand(name, backend):
    """Given:  optax.adam / adamw under a learning-rate schedule (the step size -schedule(count)
               computed once per update from the schedule's own count)
       Result: one AdamUpdate with lr=None whose second operand is that step size; the
               schedule stays primitives; three steps (the warm-up and the decay move) equal
               jax.jit's"""
    opt = SCHEDULES[name]()
    p = _params(big=True)
    s = opt.init(p)
    graph = recognize(rlx_jax.trace(_step(opt), p, s, _grads(p, 0)))
    nodes = [n for n in graph.nodes if n.kind is K.AdamUpdate]
    assert len(nodes) == 1 and nodes[0].attrs["lr"] is None
    assert nodes[0].inputs[1].shape == () and nodes[0].inputs[1].dtype == np.float32
    assert len(nodes[0].inputs) == 2 + 4 * len(p)
    _steps_equal_jax(opt, backend, p, s, seeds=(30, 31, 32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scheduled_single_node_matches_reference(backend):
    """AdamUpdate with its step size as an operand (lr None), native or decomposed."""
    r = np.random.RandomState(1)
    shapes = [(3, 4), (5,)]
    leaves = [r.uniform(-1, 1, sh).astype(np.float32) for _ in range(3) for sh in shapes] + \
        [r.uniform(0, 1, sh).astype(np.float32) for sh in shapes]
    args = [np.asarray(3, np.int32), np.asarray(-0.02, np.float32)] + leaves
    attrs = dict(lr=None, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=0.01)
    single_node_equals_reference(K.AdamUpdate, args, attrs, backend, rtol=RTOL, atol=ATOL)
