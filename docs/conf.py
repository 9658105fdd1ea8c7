"""Sphinx configuration of the documentation site: `pip install -e ".[docs]" &&
sphinx-build -W --keep-going -b html docs docs/_build/html` (CI builds it with warnings as
errors). Pages are Markdown (MyST); the home page includes the README; the API reference is
generated from the package's docstrings and annotations (autodoc)."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "rlx_jax"
author = "rlx_jax contributors"
copyright = "rlx_jax contributors, Apache-2.0"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "conformance"]
myst_heading_anchors = 4                     # `page.md#a-heading` links resolve
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False}
html_theme = "furo"
html_title = "rlx_jax"
default_role = "code"                      # `name` in a docstring is code, as in Markdown
