"""MIL program sizes of small functions: rlx_jax's Core ML programs against stablehlo-coreml's.

The functions have the forms of stablehlo-coreml's own JAX test cases (its tests/test_jax.py:
elementwise ops, einsums, reductions, windows, arg/top-k, gathers and scatters, pads, sorts,
switch, while loops, convolutions, a constant result), written here anew. For each function
and each converter, the MIL ops counted as stablehlo-coreml counts a program's size (every
operation in main and in the blocks nested in it) but without `const`s:

- built: the program as the converter builds it (rlx_jax: `build_program`, which `Lowered`'s
  `op_counts(level="backend")` reports; stablehlo-coreml: `stablehlo_coreml.convert` of the
  function's exported StableHLO module);
- saved: the ML program after `ct.convert` with the converter's own pass pipeline (rlx_jax:
  `export_coreml`'s default; stablehlo-coreml: its `build_pass_pipeline()` without
  `add_fp16_cast`, as its tests convert).

It prints one line per function and the median of rlx_jax / stablehlo-coreml per function, for
both counts, and rlx_jax's `identity` ops (which remain only where MIL requires one: a function
input returned as it is, one value returned twice, a nested block passing an outer value
through). Nothing is asserted. stablehlo-coreml is counted where the `stablehlo_coreml` package
imports; install it apart from rlx_jax's environment, e.g.

    python -m venv /tmp/shc-venv
    echo "$(python -c 'import site; print(site.getsitepackages()[0])')" \\
        > /tmp/shc-venv/lib/python3.11/site-packages/base.pth
    /tmp/shc-venv/bin/pip install --no-deps stablehlo-coreml
    /tmp/shc-venv/bin/python benchmarks/bench_mil_ops.py [--no-saved]

Without it only rlx_jax's counts are printed.
"""
import argparse
import contextlib
import copy
import logging
import os
import statistics
import sys
import tempfile
from functools import partial

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("RLX_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="rlx_mil_ops_bench_"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import rlx_jax  # noqa: E402

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i32(*shape, lo=-50, hi=50):
    return R.integers(lo, hi, shape).astype(np.int32)


def bools(*shape):
    return R.random(shape) < 0.5


def window(init, op, dims, strides, padding="VALID"):
    return lambda x: lax.reduce_window(x, init, op, dims, strides, padding)


def einsum(spec):
    return lambda a, b: jnp.einsum(spec, a, b)


def scatter(how):
    def f(arr):
        idx = jnp.arange(arr.shape[0] // 2) * 2
        return getattr(arr.at[idx], how)(jnp.arange(idx.shape[0], dtype=arr.dtype) + 1)
    return f


def switch(i, x):
    return lax.switch(i, [lambda v: v + 1, lambda v: v * 3, lambda v: -v], x)


def while_scalar(x):
    return lax.while_loop(lambda v: v < 7, lambda v: v + 2, x)


def while_vector(x):
    return lax.while_loop(lambda v: v[0] < 9, lambda v: v + 3, x)


def conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def conv_transposed(x, k):
    return lax.conv_transpose(x, k, (2, 2), ((3, 3), (3, 3)),
                              dimension_numbers=("NCHW", "OIHW", "NCHW"))


def gather_rows(operand, idx):
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    return lax.gather(operand, idx[:, None], dn, (1, operand.shape[1]),
                      mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def cases():
    """(name, function, arguments): the forms of stablehlo-coreml's JAX test cases."""
    return [
        ("add_scalar", jnp.add, (np.float32(1.5), np.float32(2))),
        ("add", jnp.add, (f32(2, 2, 2), f32(2, 2, 2))),
        ("divide", jnp.divide, (f32(20, 20), f32(20, 20))),
        ("divide_by_scalar", jnp.divide, (f32(20, 20), np.float32(3))),
        ("divide_int", jnp.divide, (i32(20, 20), i32(20, 20, lo=1))),
        ("lax_div_int", lax.div, (i32(4), i32(4, lo=1))),
        ("floordiv_int", lambda a, b: a // b, (i32(4), i32(4, lo=1))),
        ("einsum_dot", einsum("a,a"), (f32(5), f32(5))),
        ("einsum_outer", einsum("a,b->ab"), (f32(3), f32(5))),
        ("einsum_vec_mat", einsum("a,ab->b"), (f32(5), f32(5, 3))),
        ("einsum_matmul", einsum("ij,jk->ik"), (f32(3, 4), f32(4, 5))),
        ("einsum_batch_outer", einsum("abc,ajk->abcjk"), (f32(2, 3, 4), f32(2, 4, 5))),
        ("einsum_batch_contract", einsum("abcd,ackl->abdkl"), (f32(2, 3, 4, 5), f32(2, 4, 2, 5))),
        ("einsum_two_contractions", einsum("abcd,ackd->abk"),
         (f32(2, 3, 4, 5), f32(2, 4, 2, 5))),
        ("einsum_contract_all", einsum("abcd,acbd"), (f32(2, 3, 4, 5), f32(2, 4, 3, 5))),
        ("max_axis", partial(jnp.max, axis=1), (f32(2, 3, 4),)),
        ("max_keepdims", partial(jnp.max, axis=1, keepdims=True), (f32(2, 3, 4),)),
        ("sum_axis0", partial(jnp.sum, axis=0), (f32(2, 3, 4),)),
        ("sum_axes02", partial(jnp.sum, axis=(0, 2)), (f32(2, 3, 4),)),
        ("sum_all", jnp.sum, (f32(2, 3, 4),)),
        ("min_axes12", partial(jnp.min, axis=(1, 2)), (f32(2, 3, 4),)),
        ("mean_axis0", partial(jnp.mean, axis=0), (f32(2, 3, 4),)),
        ("prod_axis1", partial(jnp.prod, axis=1), (f32(2, 3, 4),)),
        ("max_int", partial(jnp.max, axis=1), (i32(2, 3, 4),)),
        ("reduce_max_init5", lambda x: lax.reduce(x, np.float32(5), lax.max, (1,)),
         (f32(2, 3, 4),)),
        ("any_bool", partial(jnp.any, axis=0), (bools(4, 6),)),
        ("all_bool", partial(jnp.all, axis=1), (bools(2, 3, 4),)),
        ("max_pool", window(-np.inf, lax.max, (1, 2, 2), (1, 2, 2)), (f32(1, 4, 4),)),
        ("min_pool", window(np.inf, lax.min, (2, 2), (2, 2)), (f32(4, 4),)),
        ("sum_pool", window(0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2)), (f32(2, 1, 4, 4),)),
        ("sum_pool_int", window(0, lax.add, (2, 2), (2, 2)), (i32(4, 4),)),
        ("max_pool_padded", window(-np.inf, lax.max, (3, 3), (1, 1), ((1, 1), (1, 1))),
         (f32(4, 4),)),
        ("argmax", jnp.argmax, (f32(2, 3, 3),)),
        ("argmax_axis1", partial(jnp.argmax, axis=1), (f32(2, 3, 3),)),
        ("argmin_axis1_keepdims", partial(jnp.argmin, axis=1, keepdims=True), (f32(2, 5, 4),)),
        ("top_k", partial(lax.top_k, k=3), (f32(3, 5, 10),)),
        ("flip", jnp.flip, (f32(5, 5, 5),)),
        ("flip_axes02", partial(jnp.flip, axis=(0, 2)), (f32(5, 5, 5),)),
        ("sin", jnp.sin, (f32(5, 6),)),
        ("tan", jnp.tan, (f32(5, 6),)),
        ("arcsin", jnp.arcsin, (np.clip(f32(5, 6), -0.9, 0.9),)),
        ("arctan", jnp.arctan, (f32(5, 6),)),
        ("sinh", jnp.sinh, (f32(5, 6),)),
        ("tanh", jnp.tanh, (f32(5, 6),)),
        ("arcsinh", jnp.arcsinh, (f32(5, 6),)),
        ("arctanh", jnp.arctanh, (np.clip(f32(5, 6), -0.9, 0.9),)),
        ("atan2", jnp.atan2, (f32(50, 20), f32(50, 20))),
        ("erf", lax.erf, (f32(5, 6),)),
        ("isfinite", jnp.isfinite, (f32(5),)),
        ("take", jnp.take, (i32(4, 6), np.array([[[0, 0], [1, 1], [2, 2]]], np.int32))),
        ("gather_rows", gather_rows, (f32(10, 5), np.array([3, 1, 7], np.int32))),
        ("gather_bool", lambda a, i: a[i], (bools(4), np.array([0, 3], np.int32))),
        ("scatter_set", scatter("set"), (f32(30),)),
        ("scatter_add", scatter("add"), (f32(30),)),
        ("scatter_max", scatter("max"), (f32(30),)),
        ("pad", partial(jnp.pad, pad_width=((0, 0), (10, 5))), (f32(10, 20),)),
        ("pad_value", partial(jnp.pad, pad_width=((1, 2), (3, 4)), constant_values=12.3),
         (f32(10, 20),)),
        ("pad_reflect", partial(jnp.pad, pad_width=((5, 4), (3, 5)), mode="reflect"),
         (f32(10, 20),)),
        ("pad_edge", partial(jnp.pad, pad_width=((5, 4), (3, 5)), mode="edge"), (f32(10, 20),)),
        ("pad_negative", lambda x: lax.pad(x, np.float32(0), ((-2, 2, 0), (1, -3, 0))),
         (f32(8, 6),)),
        ("remainder_int", jnp.remainder, (i32(3), i32(3, lo=1))),
        ("remainder", jnp.remainder, (f32(3), f32(3) + 4)),
        ("rem", lax.rem, (f32(4), f32(4) + 4)),
        ("floor", jnp.floor, (f32(4),)),
        ("ceil", jnp.ceil, (f32(4),)),
        ("clip", partial(jnp.clip, min=0.0, max=1.0), (f32(3),)),
        ("clip_int", partial(jnp.clip, min=-5, max=5), (i32(3),)),
        ("sort_int", jnp.sort, (i32(3),)),
        ("sort", jnp.sort, (f32(2, 3),)),
        ("sort_axis0", partial(jnp.sort, axis=0), (f32(2, 3),)),
        ("argsort", partial(jnp.argsort, stable=False), (f32(2, 3),)),
        ("switch", switch, (np.int32(1), np.float32(10))),
        ("reshape_scalar", lambda x: jnp.reshape(x, ()), (f32(1),)),
        ("equal_bool", jnp.equal, (bools(3), bools(3))),
        ("logical_not", jnp.logical_not, (bools(2),)),
        ("logical_xor", jnp.logical_xor, (bools(4), bools(4))),
        ("power", jnp.power, (np.abs(f32(2)) + 1, f32(2))),
        ("dynamic_slice", lambda x, s: lax.dynamic_slice(x, s, (2, 2)),
         (f32(5, 5), np.array([4, 4], np.int32))),
        ("dynamic_update_slice", lambda x, u, s: lax.dynamic_update_slice(x, u, s),
         (f32(5, 5), f32(2, 2), np.array([1, 1], np.int32))),
        ("conv", conv, (f32(1, 2, 6, 6), f32(3, 2, 3, 3))),
        ("conv_transposed", conv_transposed, (f32(1, 2, 5, 5), f32(3, 2, 4, 4))),
        ("constant_return", lambda x: jnp.array([1.0, 2.0, 3.0], jnp.float32), (f32(3),)),
        ("while_scalar", while_scalar, (np.int32(0),)),
        ("while_vector", while_vector, (np.zeros(1, np.int32),)),
        ("floordiv_float", lambda x: x // 3, (f32(1) * 5,)),
        ("round", lax.round, (f32(4),)),
        ("round_even", jnp.round, (f32(10),)),
        ("cbrt", jnp.cbrt, (f32(9),)),
        ("logistic", jax.nn.sigmoid, (f32(6),)),
    ]


def block_ops(ops, skip=("const",)):
    """Non-const MIL op types of `ops` (coremltools Operations) and of their nested blocks."""
    out = []
    for op in ops:
        if op.op_type in skip:
            continue
        out.append(op.op_type)
        for b in op.blocks:
            out.extend(block_ops(b.operations, skip))
    return out


def spec_ops(spec):
    """Non-const op types of a saved ML program (its proto), nested blocks included."""
    def walk(ops):
        for op in ops:
            if op.type != "const":
                yield op.type
            for b in op.blocks:
                yield from walk(b.operations)
    f = spec.mlProgram.functions["main"]
    return list(walk(f.block_specializations[f.opset].operations))


def ours(fn, args, tmp, saved):
    prog = rlx_jax.jit(fn, backend="coreml").lower(*args).op_counts(level="backend")
    built = sum(prog.values())
    out = {"built": built, "identity": prog.get("identity", 0)}
    if saved:
        import coremltools as ct
        path = os.path.join(tmp, f"rlx-{len(os.listdir(tmp))}.mlpackage")
        rlx_jax.export_coreml(fn, *args, path=path)
        out["saved"] = len(spec_ops(ct.utils.load_spec(path)))
    return out


@contextlib.contextmanager
def _quiet_convert():
    """ct.convert without its per-pipeline progress bars (coremltools' pass_pipeline module
    draws them with `tqdm`, imported by name)."""
    from coremltools.converters.mil.mil.passes import pass_pipeline
    bar = pass_pipeline.tqdm
    pass_pipeline.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        pass_pipeline.tqdm = bar


def theirs(fn, args, saved):
    import coremltools as ct
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from stablehlo_coreml import build_pass_pipeline, convert
    shapes = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
    exported = jax.export.export(jax.jit(fn))(*shapes)
    module = ir.Module.parse(exported.mlir_module(), context=jax_mlir.make_ir_context())
    prog = convert(module, minimum_deployment_target=ct.target.iOS18)
    out = {"built": len(block_ops(prog.functions["main"].operations))}
    if saved:
        pipeline = copy.deepcopy(build_pass_pipeline())
        pipeline.remove_passes(["common::add_fp16_cast"])
        with _quiet_convert():
            model = ct.convert(prog, source="milinternal",
                               minimum_deployment_target=ct.target.iOS18, pass_pipeline=pipeline,
                               compute_units=ct.ComputeUnit.CPU_ONLY, skip_model_load=True)
        out["saved"] = len(spec_ops(model.get_spec()))
    return out


def _stablehlo_coreml():
    try:
        import stablehlo_coreml
    except ImportError as e:
        return None, f"{e} (install it in a separate environment: see this file's docstring)"
    return stablehlo_coreml, getattr(stablehlo_coreml, "__version__", "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-saved", action="store_true",
                    help="count the built programs only (no ct.convert)")
    ap.add_argument("--only", default="", help="comma-separated case names")
    a = ap.parse_args()
    saved = not a.no_saved
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    shc, why = _stablehlo_coreml()
    import coremltools as ct
    print(f"rlx_jax {rlx_jax.__version__} ({os.path.dirname(rlx_jax.__file__)}), "
          f"coremltools {ct.__version__}, jax {jax.__version__}; stablehlo-coreml: "
          f"{why if shc is None else shc.__version__}")
    only = set(filter(None, a.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn, args in cases():
            if only and name not in only:
                continue
            try:
                us = ours(fn, args, tmp, saved)
            except Exception as e:  # noqa: BLE001 - reported, the run goes on
                print(f"{name:26s} rlx_jax failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            them = None
            if shc is not None:
                try:
                    them = theirs(fn, args, saved)
                except Exception as e:  # noqa: BLE001
                    print(f"{name:26s} stablehlo-coreml failed: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:100] if str(e) else ''}")
            rows.append((name, us, them))
    report(rows, saved, shc is not None)


def _ratio(a, b):
    return a / b if b else float("nan")


def report(rows, saved, compare):
    kinds = ["built"] + (["saved"] if saved else [])
    head = f"{'function':26s} " + " ".join(f"{'rlx ' + k:>10s}" for k in kinds) + \
        f" {'identity':>8s}"
    if compare:
        head += " " + " ".join(f"{'shc ' + k:>10s}" for k in kinds) + \
            " " + " ".join(f"{'ratio ' + k:>12s}" for k in kinds)
    print(head)
    for name, us, them in rows:
        line = f"{name:26s} " + " ".join(f"{us[k]:10d}" for k in kinds) + \
            f" {us['identity']:8d}"
        if compare and them is not None:
            line += " " + " ".join(f"{them[k]:10d}" for k in kinds) + " " + \
                " ".join(f"{_ratio(us[k], them[k]):12.2f}" for k in kinds)
        print(line)
    print(f"\n{len(rows)} functions; rlx_jax identity ops: "
          f"{sum(u['identity'] for _, u, _ in rows)} in "
          f"{sum(1 for _, u, _ in rows if u['identity'])} functions")
    for k in kinds:
        med = statistics.median(u[k] for _, u, _ in rows)
        line = f"median MIL ops per function, {k}: rlx_jax {med:g}"
        both = [(u, t) for _, u, t in rows if t is not None and t[k]]
        if compare and both:
            ratio = statistics.median(_ratio(u[k], t[k]) for u, t in both)
            line += (f", stablehlo-coreml {statistics.median(t[k] for _, t in both):g}; "
                     f"median rlx_jax / stablehlo-coreml {ratio:.2f} "
                     f"over {len(both)} functions (rlx_jax fewer in "
                     f"{sum(u[k] < t[k] for u, t in both)}, equal in "
                     f"{sum(u[k] == t[k] for u, t in both)}, more in "
                     f"{sum(u[k] > t[k] for u, t in both)})")
        print(line)
    if not compare:
        print("stablehlo-coreml's programs were not counted: the stablehlo_coreml package "
              "does not import here")


if __name__ == "__main__":
    sys.exit(main())
