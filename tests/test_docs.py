"""The README and the documentation site (docs/, Sphinx with MyST): every Python block of the
README and of every page runs as written (a page's blocks top to bottom in one namespace, in a
fresh process inside a temporary directory); the README stays a first screen that links every
page; the site's table of contents lists every page; the Layout page names every top-level
module. The site itself is built with warnings as errors in its own CI step (`sphinx-build -W`),
which also checks every link and anchor."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BACKENDS

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# pages whose blocks write a package (the rest only compute and check)
WRITES = {"README.md": "loss.mlpackage", "coreml.md": "model.mlpackage"}


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def pages():
    return sorted(p for p in DOCS.glob("*.md") if p.name != "index.md")


def with_blocks():
    return [p for p in [README, *pages()] if python_blocks(p)]


def test_pages_have_python_blocks():
    assert len(with_blocks()) >= 10 and len(python_blocks(README)) == 1


@pytest.mark.extended            # every block on every backend: with the examples
@pytest.mark.skipif(set(BACKENDS) != {"mlx", "coreml", "xla"},
                    reason="the documentation's blocks use every backend")
@pytest.mark.parametrize("page", with_blocks(), ids=lambda p: p.name)
def test_python_blocks_run(page, tmp_path):
    script = "\n\n".join(f"# ---- block {i}\n{b}" for i, b in enumerate(python_blocks(page)))
    (tmp_path / "blocks.py").write_text(script)
    env = dict(os.environ, JAX_PLATFORMS="cpu", RLX_JAX_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "blocks.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    if page.name in WRITES:
        assert (tmp_path / WRITES[page.name]).is_dir()


def test_readme_is_a_first_screen_linking_every_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", text)) - {"index.md"}
    assert linked == {p.name for p in pages()}, sorted({p.name for p in pages()} ^ linked)


def test_site_contents_list_every_page():
    index = (DOCS / "index.md").read_text()
    assert index.startswith("```{include} ../README.md\n:relative-docs: docs/\n")
    toc = [line + ".md" for block in re.findall(r"```\{toctree\}\n(.*?)```", index, re.S)
           for line in block.splitlines() if line and not line.startswith(":")]
    assert sorted(toc) == sorted(p.name for p in pages()) and len(toc) == len(set(toc))


def test_pages_link_only_to_pages_and_files_that_exist():
    """Relative links between pages (the site's strict build checks them too, anchors included;
    this keeps the default suite honest without Sphinx installed)."""
    names = {p.name for p in pages()} | {"index.md"}
    for page in pages():
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", page.read_text()):
            assert target in names or (DOCS / target).exists(), (page.name, target)


def test_layout_names_every_top_level_module_and_package():
    """The Layout page has a line for every module and package directly under rlx_jax/, and
    names nothing that is not there."""
    layout = (DOCS / "layout.md").read_text().split("```", 2)[1]
    named = set(re.findall(r"^rlx_jax/(\w+(?:\.py|/))", layout, flags=re.M))
    pkg = ROOT / "rlx_jax"
    present = {p.name + ("/" if p.is_dir() else "") for p in pkg.iterdir()
               if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}
    assert named == present, (sorted(present - named), sorted(named - present))
