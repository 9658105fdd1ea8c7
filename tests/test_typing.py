"""The public API's types as a user's type checker sees them (mypy on a small typed sample,
rlx_jax found through its py.typed marker): jit keeps the wrapped function's parameters and
result in both decorator forms, a call with a wrong argument type is an error, lower / compile /
export_coreml have their documented types."""
import os
import textwrap

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
'''

ARRAY = "jax._src.basearray.Array"


def test_public_api_types(tmp_path, monkeypatch):
    (tmp_path / "sample.py").write_text(textwrap.dedent(SAMPLE))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MYPYPATH", root)        # an editable install hides the package from mypy
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
    ], out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'Argument 2 to "__call__" of "Jitted" has incompatible type ' \
        '"str"; expected "int"' in errors[0], out
