"""Loop regressions found on the coreml backend, checked on every backend against `jax.jit` of
the same function on CPU: rank-0 loop vars whose init and body result coremltools' builder
types differently (a scalar and a rank-0 tensor)."""
import numpy as np
import pytest
from jax import lax

import rlx_jax
from .test_regressions_coreml import check

pytestmark = pytest.mark.extended   # the 'extended tests' CI step (pyproject.toml)

BACKENDS = rlx_jax.available_backends()


def _gamma_grad_mapped(a, x):   # random.gamma's gradient, as JAX's testGammaGrad takes it
    return lax.map(lambda ax: lax.random_gamma_grad(*ax), (a, x))


def _while_on_a_slice(a, x):    # init t: a scalar (gather at a scalar index); 0.5: a 0-d const
    del a
    return lax.map(lambda t: lax.while_loop(lambda c: c[0] < 3,
                                            lambda c: (c[0] + 1, c[1] * 0.5 + t),
                                            (0, t))[1], x)


def _scan_on_a_slice(a, x):     # the same carry through a Scan (a while_loop over a counter)
    return lax.map(lambda t: lax.scan(lambda c, _: (c * 0.5 + t[1], c), t[0], None, length=3),
                   (a, x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f", [_gamma_grad_mapped, _while_on_a_slice, _scan_on_a_slice],
                         ids=lambda f: f.__name__.strip("_"))
def test_rank0_loop_var_typed_alike_in_init_and_body(f, backend):
    """A rank-0 loop var whose init is a gather at a scalar index inside lax.map (coremltools
    types it as a scalar, `fp32`) and whose body result involves a 0-d const or another
    rank-0 tensor (typed `tensor[(), fp32]`): while_loop raised ValueError ("loop_vars
    'gather_1_x0' changes in the body of while_loop: double -> tensor"), reached by
    jax.grad of random.gamma (random_lax_test testGammaGrad, --eager). Core ML's rank-0 inits
    and body results are now all rank-0 tensors (mil_control._rank0_tensors). Tolerance
    rtol = atol = 1e-5 (float32; random_gamma_grad's series and digamma round differently
    per backend)."""
    a = np.array([0.3, 1.0, 4.0], np.float32)
    x = np.array([0.2, 1.5, 3.0], np.float32)
    check(f, a, x, backend=backend, exact=False)
