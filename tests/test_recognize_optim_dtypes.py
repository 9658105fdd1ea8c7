"""optax's Adam over 16-bit leaves and with `mu_dtype` recognised as AdamUpdate
(passes/recognize_optim.py): one node, hyperparameters read back as written, numerics and
result dtypes against jax.jit on every backend, over three steps, on the device."""
import jax.numpy as jnp
import numpy as np
import pytest

import rlx_jax
from rlx_jax.ir.ops import OpKind as K
from rlx_jax.passes.recognize import recognize

from .optax_cases import step as _step, three_steps_equal_jax, tree as _tree

optax = pytest.importorskip("optax")
BACKENDS = [b for b in ("xla", "mlx", "coreml") if b in rlx_jax.available_backends()]
BF16 = jnp.bfloat16
SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 50)
CASES = {   # name: (optimizer, parameter dtype)
    "adam_bf16": (lambda: optax.adam(1e-3), BF16),
    "adam_f16": (lambda: optax.adam(1e-3), np.float16),
    "adamw_schedule_bf16": (lambda: optax.adamw(SCHEDULE, weight_decay=1e-2), BF16),
    "mu_dtype_bf16": (lambda: optax.adam(1e-3, mu_dtype=BF16), np.float32),
    "mu_dtype_f16_schedule": (lambda: optax.adam(SCHEDULE, mu_dtype=np.float16), np.float32),
    "mu_dtype_f32_bf16": (lambda: optax.adam(1e-3, mu_dtype=np.float32), BF16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_whole_step_is_one_node(name):
    make, dtype = CASES[name]
    opt, p = make(), _tree(0, dtype)
    graph = recognize(rlx_jax.trace(_step(opt), p, opt.init(p), _tree(1, dtype, 0.1)))
    counts = graph.op_counts()
    assert counts["AdamUpdate"] == 1
    if "schedule" not in name:                  # a schedule's step size stays primitives
        assert counts == {"AdamUpdate": 1}


def test_16_bit_hyperparameters_are_read_back_as_written():
    """lr and eps stand only as bfloat16 constants in a bfloat16 leaf's formula (1e-3 is
    0.000999451 there); b1 and b2 also as float32 ones (the bias corrections)"""
    opt, p = optax.adam(1e-3, b1=0.8, b2=0.99, eps=1e-6), _tree(0, BF16)
    graph = recognize(rlx_jax.trace(_step(opt), p, opt.init(p), _tree(1, BF16)))
    (node,) = [n for n in graph.nodes if n.kind is K.AdamUpdate]
    assert node.attrs == {"lr": 1e-3, "b1": 0.8, "b2": 0.99, "eps": 1e-6, "eps_root": 0.0,
                          "weight_decay": 0.0}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_three_steps_equal_jax(name, backend):
    make, dtype = CASES[name]
    three_steps_equal_jax(make(), dtype, backend, "AdamUpdate")
