"""Recognition of JAX autodiff output (passes/recognize.py): it fires exactly on JAX's own
transposes, and the recognised graph, decomposed on xla, equals plain-JAX gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx_jax
from rlx_jax.backends.base import all_backends
from rlx_jax.ir.ops import PRIMITIVE
from rlx_jax.passes.legalize import legalize
from rlx_jax.passes.recognize import recognize

from .conftest import BACKENDS

R = np.random.RandomState(0)
X = R.randn(2, 8, 8, 3).astype(np.float32)
W = R.randn(3, 3, 3, 4).astype(np.float32)
XC = R.randn(2, 3, 9, 9).astype(np.float32)
WC = R.randn(4, 3, 3, 3).astype(np.float32)
EMB = R.randn(10, 4).astype(np.float32)
TOK = np.array([[1, 2], [3, -1]], np.int32)


def conv_loss(strides, padding, dn=("NHWC", "HWIO", "NHWC"), rhs_dilation=None):
    def loss(x, w):
        y = lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=rhs_dilation,
                                     dimension_numbers=dn)
        return jnp.sum(y ** 2)
    return jax.grad(loss, argnums=(0, 1))


def pool_loss(window, strides, padding):
    def loss(x):
        return jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding) ** 2)
    return jax.grad(loss)


PROGRAMS = {
    "conv_s2_pad1": (conv_loss((2, 2), ((1, 1), (1, 1))), (X, W),
                     {"Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "Conv": 1}),
    "conv_same_s1": (conv_loss((1, 1), "SAME"), (X, W),
                     {"Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "Conv": 1}),
    "conv_valid_s2": (conv_loss((2, 2), "VALID"), (X, W),
                      {"Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "Conv": 1}),
    "conv_asym": (conv_loss((3, 2), ((0, 2), (1, 0))), (X, W),
                  {"Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "Conv": 1}),
    "conv_nchw_dilated": (conv_loss((2, 2), "SAME", dn=None, rhs_dilation=(2, 1)), (XC, WC),
                          {"Conv2dBackwardInput": 1, "Conv2dBackwardWeight": 1, "Conv": 1}),
    "maxpool": (pool_loss((1, 2, 2, 1), (1, 2, 2, 1), "VALID"), (X,),
                {"MaxPool2dBackward": 1, "Pool": 1}),
    "maxpool_overlap_same": (pool_loss((1, 3, 3, 1), (1, 2, 2, 1), "SAME"), (X,),
                             {"MaxPool2dBackward": 1, "Pool": 1}),
    "embedding": (jax.grad(lambda e, t: jnp.sum(e[t] ** 2)), (EMB, TOK),
                  {"GatherBackward": 1, "Gather": 1}),
    "take": (jax.grad(lambda e, t: jnp.sum(jnp.take(e, t, axis=0) ** 2)), (EMB, TOK),
             {"GatherBackward": 1, "Gather": 1}),
    "cumsum": (jax.grad(lambda e: jnp.sum(jnp.cumsum(e, 0) ** 2)), (EMB,),
               {"CumsumBackward": 1, "Cumsum": 1}),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_recognised_then_decomposed_equals_jax(name):
    """Given:  jax.grad of a conv / max-pool / gather / cumsum loss, as JAX emits it (transposed
               convolutions, select_and_scatter_add, scatter-add into zeros, reversed cumsum)
       Result: exactly the PROGRAMS[name] counts (e.g. Conv2dBackwardInput: 1,
               Conv2dBackwardWeight: 1, Conv: 1), no SelectAndScatterAdd or ScatterAdd left;
               decomposed and run on xla, equal to jax.grad"""
    fn, args, expected = PROGRAMS[name]
    graph = recognize(rlx_jax.trace(fn, *args))
    counts = graph.op_counts()
    assert {k: counts.get(k, 0) for k in expected} == expected
    assert "SelectAndScatterAdd" not in counts and "ScatterAdd" not in counts
    legal = legalize(graph, PRIMITIVE, backend="xla")
    got = all_backends()["xla"].lower(legal)(*args)
    for g, w in zip(got, jax.tree.leaves(fn(*args))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["conv_s2_pad1", "maxpool", "embedding", "cumsum"])
def test_recognised_gradients_on_every_backend(name, backend):
    """Given:  four of the PROGRAMS, through rlx_jax.jit on each backend
       Result: every expected kind is in the lowered IR; values equal jax.grad"""
    fn, args, expected = PROGRAMS[name]
    jitted = rlx_jax.jit(fn, backend=backend)
    assert all(k in jitted.lower(*args).graph.op_counts() for k in expected)
    for g, w in zip(jax.tree.leaves(jitted(*args)), jax.tree.leaves(fn(*args))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-4, rtol=1e-4)


NOT_RECOGNISED = {
    # a min-pool's transpose selects with le: not a max-pool backward
    "minpool": (jax.grad(lambda x: jnp.sum(lax.reduce_window(
        x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") ** 2)), (X,)),
    # a 1-D convolution: rank 3, not Conv2d
    "conv1d": (jax.grad(lambda x, w: jnp.sum(lax.conv_general_dilated(
        x, w, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")) ** 2), argnums=(0, 1)),
        (X[:, 0], W[0])),
    # a forward convolution with stride 1 is not read as a kernel gradient
    "forward_conv": (lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), (X, W)),
    # scatter-add into a non-zero table
    "scatter_into_ones": (lambda e, t: jnp.ones_like(e).at[t].add(e[t]), (EMB, TOK)),
    # a forward cumsum
    "forward_cumsum": (lambda e: jnp.cumsum(e, 1), (EMB,)),
}


@pytest.mark.parametrize("name", NOT_RECOGNISED)
def test_inexact_patterns_do_not_fire(name):
    """Given:  a program that resembles an autodiff pattern but is not one (min-pool transpose,
               1-D conv, forward conv, scatter-add into ones, forward cumsum)
       Result: recognize leaves the op counts unchanged"""
    fn, args = NOT_RECOGNISED[name]
    graph = rlx_jax.trace(fn, *args)
    assert recognize(graph).op_counts() == graph.op_counts()


def test_recognition_without_flax_or_optax_installed():
    """The package needs neither flax, optax nor equinox (they are test extras): in a process
    where all three fail to import, rlx_jax imports and recognises the formulas that need
    none of them."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "for m in ('flax', 'optax', 'equinox'): sys.modules[m] = None\n"
        "import jax, jax.numpy as jnp, numpy as np, rlx_jax\n"
        "f = lambda x, g: x * jax.lax.rsqrt(jnp.mean(x**2, -1, keepdims=True) + 1e-6) * g\n"
        "x, g = np.ones((3, 5), np.float32), np.ones(5, np.float32)\n"
        "print(rlx_jax.jit(f, backend='mlx').lower(x, g).op_counts())\n"
        "print(rlx_jax.jit(jax.nn.softmax, backend='mlx').lower(x).op_counts())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["{'RmsNorm': 1}", "{'Softmax': 1}"], out.stdout
