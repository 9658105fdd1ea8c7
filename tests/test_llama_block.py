"""A LLaMA-style block in bfloat16 with float32 master weights (tests/llama_block.py) trained 3
steps with optax.adamw under a warm-up + cosine schedule: RmsNorm, Rope, Attention, their
backward kinds and one AdamUpdate on mlx and coreml (Core ML with bfloat16="float32": it has no
bfloat16 tensors); the MIL program at least 40% smaller than with recognize=False; every loss
within bfloat16's tolerance of jax.jit's on every backend."""
import jax
import numpy as np
import pytest

import rlx_jax

from .llama_block import make

KINDS = {"RmsNorm": 3, "RmsNormBackwardInput": 3, "RmsNormBackwardGamma": 3, "Rope": 2,
         "RopeBackward": 2, "Attention": 1, "AttentionBackward": 1, "AdamUpdate": 1}


def _options(backend):
    return {"bfloat16": "float32"} if backend == "coreml" else {}


def test_llama_block_trains_with_native_kinds(backend):
    step, args = make()
    jitted = rlx_jax.jit(step, backend=backend, **_options(backend))
    lowered = jitted.lower(*args)
    if backend != "xla":                      # the reference decomposes every kind
        counts = lowered.op_counts()
        assert {k: counts.get(k, 0) for k in KINDS} == KINDS, counts
        assert lowered.placement().device_only
    ours, want, reference = args, args, jax.jit(step)
    for _ in range(3):
        *ours, got = jitted(*ours)
        *want, expected = reference(*want)
        ours, want = (*ours, *args[2:]), (*want, *args[2:])
        # bfloat16 activations: about 3 significant digits per op (rtol 2**-8 each)
        np.testing.assert_allclose(float(got), float(expected), rtol=3e-3)


@pytest.mark.skipif("coreml" not in rlx_jax.available_backends(),
                    reason="coremltools is not installed")
def test_llama_block_mil_program_smaller_recognised():
    step, args = make()
    ops = [sum(rlx_jax.jit(step, backend="coreml", recognize=rec, bfloat16="float32")
               .lower(*args).op_counts(level="backend").values()) for rec in (True, False)]
    assert ops[0] <= 0.6 * ops[1], ops          # measured: 461 vs 795 MIL ops
