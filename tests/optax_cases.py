"""Shared pieces of the optax update tests (test_recognize_optim*.py, test_recognize_lion.py):
parameter trees, the update step, and one update node run alone against its reference."""
import jax
import jax.numpy as jnp
import numpy as np

from rlx_jax.backends.base import all_backends, kept_kinds
from rlx_jax.ir.reference import evaluate
from rlx_jax.passes.legalize import legalize

from .nn_cases import single_node_graph


def tree(seed, dtype, scale=1.0):
    """A parameter (or gradient) tree of leaves of ranks 0 to 3 in `dtype`."""
    r = np.random.default_rng(seed)
    shapes = {"w": (3, 4), "b": (4,), "s": (), "k": (2, 3, 2)}
    return {k: jnp.asarray(r.normal(size=s) * scale, dtype) for k, s in shapes.items()}


def step(opt):
    """opt.update + optax.apply_updates: (p, state, g) -> (p', state')."""
    import optax

    def update(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s
    return update


def close(got, want, dtype):
    """Equal dtypes, and values one rounding of a `dtype` result apart (XLA keeps some fused
    16-bit intermediates in float32)."""
    tol = 2 * float(jnp.finfo(dtype).eps)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   rtol=tol, atol=tol)


def single_node_equals_reference(kind, args, attrs, backend, rtol, atol):
    """`kind` alone over `args`, native (mlx, coreml) or decomposed (xla), equals its
    reference semantics."""
    graph, node = single_node_graph(kind, [(a.shape, a.dtype) for a in args], attrs)
    be = all_backends()[backend]
    legal = legalize(graph, kept_kinds(be), backend=backend)
    assert (kind in legal.kinds()) == (backend != "xla")
    got, want = be.lower(legal, name=kind.name)(*args), evaluate(node, *args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def three_steps_equal_jax(opt, dtype, backend, kind):
    """Three steps of `opt` over `dtype` leaves through rlx_jax.jit(backend) (bfloat16
    computed in float32 on Core ML, which has no bfloat16 tensors) equal jax.jit's within one
    rounding of the narrowest of the leaves' and mu's dtypes; on mlx and coreml the step is
    one `kind` node and runs on the device."""
    import rlx_jax
    update, p = step(opt), tree(0, dtype)
    s = opt.init(p)
    mu = np.dtype(jax.tree.leaves(s[0].mu)[0].dtype)
    narrow = min(np.dtype(dtype), mu, key=lambda d: jnp.finfo(d).bits)
    wide = {"bfloat16": "float32"} if backend == "coreml" and "bfloat16" in \
        (np.dtype(dtype).name, mu.name) else {}
    fast = rlx_jax.jit(update, backend=backend, **wide)
    compiled = fast.lower(p, s, tree(1, dtype, 0.1)).compile()
    if backend != "xla":
        assert compiled.lowered.op_counts()[kind] == 1
        rlx_jax.testing.assert_ran_on_device(compiled)
    want = got = (p, s)
    for i in range(3):
        g = tree(10 + i, dtype, 0.1)
        want, got = jax.jit(update)(*want, g), fast(*got, g)
        close(got, want, narrow)
