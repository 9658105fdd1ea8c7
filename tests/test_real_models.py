"""Models written the way flax/optax users write them, on Core ML and MLX, against jax.jit:
a flax ViT training gradient (cls-token tile, conv patches, attention), a remat'd layer stack
(jax.checkpoint with a saving policy), an nnx.Optimizer step (uint32 step counter)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlx_jax

from .conftest import BACKENDS

nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")
DEVICE_BACKENDS = [b for b in ("coreml", "mlx") if b in BACKENDS]
# whole models (a ViT's gradient, remat, an nnx optimizer) run with the examples, in the
# 'extended tests' CI step
pytestmark = pytest.mark.extended


class ViT(nn.Module):
    @nn.compact
    def __call__(self, x):
        b = x.shape[0]
        x = nn.Conv(32, (4, 4), strides=(4, 4))(x).reshape(b, -1, 32)
        cls = self.param("cls", nn.initializers.normal(0.02), (1, 1, 32))
        x = jnp.concatenate([jnp.tile(cls, (b, 1, 1)), x], axis=1)
        for _ in range(2):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=2)(h, h)
            x = x + nn.Dense(32)(nn.gelu(nn.Dense(64)(nn.LayerNorm()(x))))
        return nn.Dense(10)(x[:, 0])


def _close(got, want, rtol, atol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=atol)


def _host_ops(f, *args):
    return [(n.kind.name, why) for n, why in f.lower(*args).placement().host_ops()]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_flax_vit_gradient_runs_all_on_the_device(backend):
    model = ViT()
    x = np.random.RandomState(0).randn(2, 16, 16, 3).astype(np.float32)
    labels = np.array([1, 3])
    params = model.init(jax.random.PRNGKey(0), x)

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
    f = rlx_jax.jit(jax.grad(loss), backend=backend)
    assert _host_ops(f, params, x, labels) == []
    _close(f(params, x, labels), jax.jit(jax.grad(loss))(params, x, labels), 2e-3, 2e-4)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_remat_with_a_saving_policy_runs_all_on_the_device(backend):
    def stack(w, x):
        layer = jax.checkpoint(lambda h: jnp.tanh(h @ w),
                               policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
        return layer(layer(layer(x))).sum()
    r = np.random.RandomState(1)
    w, x = (r.randn(8, 8) * 0.3).astype(np.float32), r.randn(4, 8).astype(np.float32)
    f = rlx_jax.jit(jax.grad(stack), backend=backend)
    assert _host_ops(f, w, x) == []
    _close(f(w, x), jax.grad(stack)(w, x), 1e-5, 1e-6)


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1, self.l2 = nnx.Linear(8, 16, rngs=rngs), nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x)))


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.host("the optimizer's uint32 step count + 1 may leave int32 range: on the host", backends=("coreml",))
def test_nnx_optimizer_step(backend):
    """Core ML: only the uint32 step counter's `+ 1` (which may leave int32 range) runs on the
    host; MLX: everything on the device. Both equal jax.jit over 3 steps."""
    model = MLP(nnx.Rngs(0))
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)))

    def step(state, x, y):
        model, opt = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
        opt.update(model, grads)
        return nnx.state((model, opt)), loss
    r = np.random.RandomState(3)
    x, y = r.randn(5, 8).astype(np.float32), r.randn(5, 1).astype(np.float32)
    f = rlx_jax.jit(step, backend=backend)
    host = _host_ops(f, state, x, y)
    if backend == "coreml":
        assert [k for k, _ in host] == ["Binary"] and "u32[]" in host[0][1], host
    else:
        assert host == []
    got, want = state, state
    for _ in range(3):
        (got, gl), (want, wl) = f(got, x, y), jax.jit(step)(want, x, y)
        _close((got, gl), (want, wl), 1e-5, 1e-6)
