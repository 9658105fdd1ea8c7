"""Host-fallback boundary cost: a transformer forward whose op between two blocks runs on the
host, against the same program all on the device, measured side by side in one run.

The program is a 4-block pre-norm transformer forward written in jnp; between blocks 2 and 3
sits `x + 0.0` (kept by JAX). The all-device run is the ordinary `rlx_jax.jit` executable; the
host run is the same legalized graph with that one add placed on the host (partitioned into
device, host, device segments, as the partitioner does for an op the backend cannot run), so
the figure is the cost of the boundary alone: two crossings of the [batch, seq, dim] activation,
one host segment run by jax on the CPU, one more device executable call.

Core ML runs through the MIL reference executor on Linux (its absolute times are NumPy's, not
Core ML's); MLX runs compiled on the CPU. Step = min over rounds of the median time of a call.

Run: python benchmarks/bench_placement.py [--batch 4] [--seq 64] [--dim 128] [--backends mlx,coreml]
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rlx_jax
from rlx_jax.ir.ops import OpKind
from rlx_jax.placement import Placement, partition
from rlx_jax.placement.executable import PartitionedExecutable

from bench_mlx import side_by_side  # noqa: E402  (benchmarks/ is on sys.path)

BLOCKS, MARK_AFTER = 4, 2


def layer_norm(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g


def block(p, x, heads=4):
    b, t, d = x.shape
    h = layer_norm(x, p["g1"])
    q, k, v = (h @ p["wq"], h @ p["wk"], h @ p["wv"])
    split = lambda a: a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
    s = jnp.einsum("bhqd,bhkd->bhqk", split(q), split(k)) / np.sqrt(d // heads)
    a = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), split(v))
    x = x + a.transpose(0, 2, 1, 3).reshape(b, t, d) @ p["wo"]
    h = layer_norm(x, p["g2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def forward(params, x):
    for i, p in enumerate(params):
        x = block(p, x)
        if i + 1 == MARK_AFTER:
            x = x + 0.0                      # the op placed on the host
    return x


def make_params(r, dim):
    def w(*s):
        return (r.randn(*s) / np.sqrt(s[0])).astype(np.float32)
    return [{"g1": np.ones(dim, np.float32), "g2": np.ones(dim, np.float32),
             "wq": w(dim, dim), "wk": w(dim, dim), "wv": w(dim, dim), "wo": w(dim, dim),
             "w1": w(dim, 4 * dim), "w2": w(4 * dim, dim)} for _ in range(BLOCKS)]


def _marked(graph):
    for n in graph.nodes:
        if n.kind is OpKind.Binary and n.attrs["fn"] == "add":
            c = n.inputs[1].node
            if c.kind is OpKind.Constant and np.all(c.attrs["value"] == 0):
                return n
    raise SystemExit("the marked add was not found in the legalized graph")


def run(backend, params, x, n):
    jitted = rlx_jax.jit(forward, backend=backend)
    lowered = jitted.lower(params, x)
    device = lowered.compile()
    graph = lowered.legalized
    host = {id(_marked(graph)): "placed on the host by the benchmark"}
    placed = Placement(graph, lowered.backend, partition(graph, host), host)
    opts = {k: v for k, v in lowered.options.items() if k != "output"}
    split = PartitionedExecutable(placed, f"{lowered.name}.split", opts)
    leaves = jax.tree_util.tree_leaves((params, x))
    want = np.asarray(jax.jit(forward)(params, x))
    got_split = np.asarray(split(*leaves)[0])
    got_dev = np.asarray(device(params, x))
    err = max(np.abs(got_split - want).max(), np.abs(got_dev - want).max())

    def call_device():
        jax.block_until_ready(device(params, x))

    def call_split():
        out = split(*leaves)
        if backend == "mlx":
            import mlx.core as mx
            mx.eval(out)
    t_dev, t_split = side_by_side(call_device, call_split, n)
    kinds = [s.placement for s in placed.segments]
    print(f"{backend:7s} segments {'/'.join(kinds)}; crossing {placed.crossing_bytes()} B per "
          f"call ({split.last_crossings['conversions']} conversions, "
          f"{split.last_crossings['bytes']} B converted); all-device {t_dev * 1e3:.2f} ms, "
          f"with host segment {t_split * 1e3:.2f} ms ({t_split / t_dev:.2f}x, "
          f"+{(t_split - t_dev) * 1e3:.2f} ms); max |err| vs jax {err:.1e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--backends", default="mlx,coreml")
    a = ap.parse_args()
    r = np.random.RandomState(0)
    params = make_params(r, a.dim)
    x = r.randn(a.batch, a.seq, a.dim).astype(np.float32)
    print(f"transformer forward, {BLOCKS} blocks, x f32[{a.batch},{a.seq},{a.dim}] "
          f"({x.nbytes} B), host op after block {MARK_AFTER}")
    for b in a.backends.split(","):
        if b in rlx_jax.available_backends():
            run(b, params, x, a.n)


if __name__ == "__main__":
    main()
