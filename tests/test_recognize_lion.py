"""optax's Lion step recognised as LionUpdate (passes/recognize_optim.py): one node per group
of leaves, hyperparameters read back as written, numerics against jax.jit on every backend
over three steps, on the device, the node alone against its reference, and the near misses
that must stay primitives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.recognize import recognize

from .optax_cases import single_node_equals_reference, three_steps_equal_jax
from .optax_cases import step as _step, tree as _tree

optax = pytest.importorskip("optax")
BACKENDS = [b for b in ("xla", "mlx", "coreml") if b in rlx_jax.available_backends()]
BF16 = np.dtype(jnp.bfloat16)
SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 50)
CASES = {   # name: (optimizer, parameter dtype)
    "lion": (lambda: optax.lion(1e-3), np.float32),
    "no_weight_decay": (lambda: optax.lion(3e-4, b1=0.95, b2=0.98, weight_decay=0.0),
                        np.float32),
    "schedule": (lambda: optax.lion(SCHEDULE, weight_decay=0.1), np.float32),
    "bf16": (lambda: optax.lion(1e-3), BF16),
    "mu_dtype_bf16": (lambda: optax.lion(1e-3, mu_dtype=BF16), np.float32),
    "f16": (lambda: optax.lion(1e-3), np.float16),
}


COUNT = {"Compare": 1, "Binary": 1, "Where": 1}      # optax.safe_increment of the count


def _counts(opt, dtype=np.float32):
    p = _tree(0, dtype)
    return recognize(rlx_jax.trace(_step(opt), p, opt.init(p), _tree(1, dtype))).op_counts()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_whole_step_is_one_node(name):
    make, dtype = CASES[name]
    counts = _counts(make(), dtype)
    assert counts["LionUpdate"] == 1
    if name != "schedule":             # a schedule's step size stays primitives, as does
        assert counts == {"LionUpdate": 1, **COUNT}       # the count's increment


def test_hyperparameters_are_read_back_as_written():
    opt, p = optax.lion(3e-4, b1=0.95, b2=0.98, weight_decay=0.1), _tree(0, np.float32)
    graph = recognize(rlx_jax.trace(_step(opt), p, opt.init(p), _tree(1, np.float32)))
    (node,) = [n for n in graph.nodes if n.kind is K.LionUpdate]
    assert node.attrs == {"lr": 3e-4, "b1": 0.95, "b2": 0.98, "weight_decay": 0.1}
    assert len(node.inputs) == 3 * 4 and len(node.outputs) == 2 * 4


def test_two_optimizers_are_two_groups():
    fast, slow = optax.lion(1e-2), optax.lion(1e-4)
    p, q = _tree(0, np.float32), _tree(1, np.float32)

    def both(p, q, sp, sq, g):
        return _step(fast)(p, sp, g), _step(slow)(q, sq, g)
    graph = recognize(rlx_jax.trace(both, p, q, fast.init(p), slow.init(q), _tree(2, np.float32)))
    assert graph.op_counts() == {"LionUpdate": 2, **{k: 2 * v for k, v in COUNT.items()}}


NEAR_MISSES = {
    # sign replaced by tanh(beta · x)
    "smooth": lambda: optax.chain(optax.scale_by_lion(mode="smooth"),
                                  optax.add_decayed_weights(1e-3),
                                  optax.scale_by_learning_rate(1e-3)),
    # the decay applied after the learning rate: another formula
    "decay_after_lr": lambda: optax.chain(optax.scale_by_lion(),
                                          optax.scale_by_learning_rate(1e-3),
                                          optax.add_decayed_weights(1e-3)),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_stay_primitives_and_equal_jax(name):
    opt = NEAR_MISSES[name]()
    p = _tree(0, np.float32)
    s, g = opt.init(p), _tree(3, np.float32, 0.1)
    assert "LionUpdate" not in _counts(opt)
    got = rlx_jax.jit(_step(opt), backend="mlx" if "mlx" in BACKENDS else "xla")(p, s, g)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                                                         rtol=1e-6, atol=1e-7),
                 got, jax.jit(_step(opt))(p, s, g))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_three_steps_equal_jax(name, backend):
    make, dtype = CASES[name]
    three_steps_equal_jax(make(), dtype, backend, "LionUpdate")


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_node_matches_reference(backend):
    """LionUpdate alone, native (mlx, coreml) or decomposed (xla), against its reference;
    a NaN gradient gives a NaN parameter (JAX's sign(NaN) is NaN, not MLX's or MIL's)."""
    r = np.random.RandomState(0)
    leaves = [r.uniform(-1, 1, s).astype(np.float32) for _ in range(3)
              for s in [(3, 4), (5,), ()]]
    leaves[3][0, 0] = np.nan                        # g of the first leaf
    single_node_equals_reference(K.LionUpdate, leaves, dict(lr=0.01, b1=0.9, b2=0.99,
                                                            weight_decay=0.1),
                                 backend, rtol=1e-6, atol=1e-7)
