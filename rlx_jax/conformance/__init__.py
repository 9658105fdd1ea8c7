"""JAX's own test suite through an rlx_jax backend: `python -m rlx_jax.conformance`.

JAX's test classes run unchanged with every `jax.jit` that the test module or
`jax._src.test_util` calls (its `_CompileAndCheck` among them) replaced by
`rlx_jax.jit(backend=...)`; JAX's own assertions judge the results. Each case runs in a worker
process (a crash or a hang fails that case alone; the worker is replaced). Cases that fail are
run again under plain `jax.jit` in a fresh worker: those that fail there too are reported
apart, as are cases that pass without building an rlx_jax program.

- `shim.py`: the jit replacement and what a case built;
- `cases.py`: finding the test files and their case ids, the JAX release check;
- `worker.py`: the worker process (one case at a time, results as JSON lines);
- `pool.py`: the workers, timeouts, crashes and the plain-JAX rerun;
- `report.py`: per-file pass rates, failure categories, skips;
- `__main__.py`: the command line.
"""
