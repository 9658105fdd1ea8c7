"""The README's python blocks run as written, top to bottom in one namespace (later blocks use
what earlier ones define), in a fresh process inside a temporary directory."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BACKENDS

README = Path(__file__).parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_blocks():
    assert len(python_blocks()) >= 4


@pytest.mark.extended            # every README block on every backend: with the examples
@pytest.mark.skipif(set(BACKENDS) != {"mlx", "coreml", "xla"},
                    reason="the README's blocks use every backend")
def test_readme_python_blocks_run(tmp_path):
    script = "\n\n".join(f"# ---- block {i}\n{b}" for i, b in enumerate(python_blocks()))
    (tmp_path / "readme_blocks.py").write_text(script)
    env = dict(os.environ, JAX_PLATFORMS="cpu", RLX_JAX_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "readme_blocks.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "model.mlpackage").is_dir()


def test_layout_names_every_top_level_module_and_package():
    """README "Layout" has a line for every module and package directly under rlx_jax/, and
    names nothing that is not there."""
    layout = README.read_text().split("## Layout", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"^rlx_jax/(\w+(?:\.py|/))", layout, flags=re.M))
    pkg = README.parent / "rlx_jax"
    present = {p.name + ("/" if p.is_dir() else "") for p in pkg.iterdir()
               if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}
    assert named == present, (sorted(present - named), sorted(named - present))
