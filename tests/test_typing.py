"""The public API's types as a user's type checker sees them (mypy on a small typed sample,
rlx_jax found through its py.typed marker): jit keeps the wrapped function's parameters and
result in both decorator forms, a call with a wrong argument type is an error, lower / compile /
export_coreml / the placement / testing.check_grads / the nn ops have their documented types.
And the package itself passes mypy with the project's configuration (pyproject.toml
[tool.mypy]: the public modules with every per-module check of --strict)."""
import os
import textwrap
import tomllib

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")

SAMPLE = '''
import jax
import jax.numpy as jnp

import rlx_jax


def f(x: jax.Array, n: int) -> jax.Array:
    return x * n


g = rlx_jax.jit(f, backend="xla")
reveal_type(g)
reveal_type(g(jnp.ones(3), 2))


@rlx_jax.jit(backend="mlx")
def h(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return x, x


reveal_type(h)
reveal_type(h.lower(jnp.ones(3)))
reveal_type(rlx_jax.jit(f).lower(jnp.ones(3), 2).compile())
reveal_type(rlx_jax.export_coreml(f, jnp.ones(3), 2, path="m.mlpackage"))
reveal_type(rlx_jax.compression_report("m.mlpackage"))
g(jnp.ones(3), "two")
lowered = g.lower(jnp.ones(3), 2)
g.lower(jax.ShapeDtypeStruct((3,), jnp.float32), 2)    # as jax.jit's lower takes it
assert isinstance(lowered, rlx_jax.Lowered)
reveal_type(lowered.placement())
reveal_type(lowered.placement().to_dot())
reveal_type(lowered.op_counts())
compiled = lowered.compile()
reveal_type(compiled(jnp.ones(3), 2))
reveal_type(compiled.cost_analysis())
reveal_type(compiled.runtime)
reveal_type(rlx_jax.testing.check_grads)
reveal_type(rlx_jax.nn.layer_norm(jnp.ones((2, 3)), jnp.ones(3), jnp.zeros(3)))
reveal_type(rlx_jax.nn.rope_tables(8, 4))
reveal_type(rlx_jax.trace(f, jnp.ones(3), 2))
reveal_type(rlx_jax.available_backends())
'''

ARRAY = "jax._src.basearray.Array"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_public_api_types(tmp_path, monkeypatch):
    (tmp_path / "sample.py").write_text(textwrap.dedent(SAMPLE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MYPYPATH", ROOT)        # an editable install hides the package from mypy
    out, err, _ = mypy_api.run(["--follow-imports=silent", "--no-error-summary",
                                "--cache-dir", str(tmp_path / ".mypy_cache"), "sample.py"])
    revealed = [line.split('Revealed type is "')[1][:-1].replace("builtins.", "")
                for line in out.splitlines() if "Revealed type" in line]
    assert revealed == [
        f"rlx_jax.api.Jitted[[x: {ARRAY}, n: int], {ARRAY}]",
        ARRAY,
        f"rlx_jax.api.Jitted[[x: {ARRAY}], tuple[{ARRAY}, {ARRAY}]]",
        "rlx_jax.stages.Lowered | rlx_jax.symbolic.SymbolicLowered",
        "rlx_jax.stages.Compiled | rlx_jax.symbolic.SymbolicCompiled",
        "str",
        "dict[str, Any] | None",
        "rlx_jax.placement.plan.Placement",
        "str",
        "dict[str, int]",
        "Any",
        "dict[str, float]",
        "str",
        "def (f: def (*Any, **Any) -> Any, args: typing.Sequence[Any], *, backend: str, "
        "order: int =, eps: float | None =, atol: float | None =, rtol: float | None =, "
        "directions: int =, seed: int =)",
        ARRAY,
        f"tuple[{ARRAY}, {ARRAY}]",
        "rlx_jax.ir.graph.Graph",
        "list[str]",
    ], out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'Argument 2 to "__call__" of "Jitted" has incompatible type ' \
        '"str"; expected "int"' in errors[0], out


def test_package_passes_mypy(tmp_path, monkeypatch):
    """`mypy -p rlx_jax` with pyproject.toml's configuration finds no error (about 20 s from an
    empty cache on two cores; the cache is the test's own)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MYPYPATH", ROOT)
    out, err, status = mypy_api.run(["--config-file", os.path.join(ROOT, "pyproject.toml"),
                                     "--cache-dir", str(tmp_path / ".mypy_cache"),
                                     "--no-error-summary", "-p", "rlx_jax"])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 0 and not errors, out + err


def test_public_modules_get_every_strict_check():
    """mypy applies `strict = true` to every module wherever it is written, so the public
    modules' override lists the per-module flags --strict sets: all of them, with strict's
    values (the global ones, warn_redundant_casts and warn_unused_configs, are set globally)."""
    from mypy.main import process_options
    from mypy.options import PER_MODULE_OPTIONS
    _, plain = process_options(["--config-file", os.devnull, "-c", "pass"])
    _, strict = process_options(["--config-file", os.devnull, "--strict", "-c", "pass"])
    flags = {k: getattr(strict, k) for k in PER_MODULE_OPTIONS
             if getattr(strict, k) != getattr(plain, k)}
    assert "disallow_untyped_defs" in flags and "warn_return_any" in flags, flags
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)["tool"]["mypy"]
    public = [o for o in config["overrides"] if "rlx_jax.api" in o["module"]]
    assert len(public) == 1
    # (implicit_reexport = false: the one flag strict turns off)
    assert {k: public[0].get(k) for k in flags} == flags
    assert config["warn_redundant_casts"] and config["warn_unused_configs"]
    assert "strict" not in config
