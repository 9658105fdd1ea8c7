"""Differential fuzzing of rlx_jax against JAX.

Random, well-typed JAX programs (3-25 ops over f32/f16/i32/bool values, size-0 and size-1
dimensions, optionally under `jax.grad`) are generated from a seed, run with `jax.jit` on CPU
and with `rlx_jax.jit(fn, backend=b)`, and compared (oracle.py has the tolerance table). Every
mismatch or crash is shrunk to a minimal program and printed as a runnable script.

    python -m tests.fuzz --backend mlx,coreml,xla --count 10000 --seed 0 --grad-fraction 0.3 \\
        --out report.txt

Modules: program.py (op records, source text, reproducers), generate.py + ops_*.py (the
generator and its op table; ops_window.py: top_k, reduce_window, tie-heavy sorts), oracle.py
(reference, comparison, tolerances), worker.py (backend calls in a child process: a SIGFPE or
segfault is reported as a crash of that one program), shrink.py, runner.py (the loop and
summary), cli.py.

Generator options (generate.Config, CLI flags): `exclude` drops op names (`--exclude conv1d`),
`conv_zero_size=False` keeps convolution operands free of size-0 dimensions
(`--no-conv-zero-size`), `max_ops`, `grad_fraction`, `zero_dim_prob`, `special_prob`.
"""
