"""The examples run end to end on every available backend (each asserts its own results)."""
import os
import subprocess
import sys

import pytest

from rlx_jax.backends.base import get_backend
from rlx_jax.ir.ops import OpKind

from .conftest import BACKENDS

pytestmark = pytest.mark.extended   # the 'extended tests' CI step (pyproject.toml)

# the backends that lower control flow (the others refuse it: tests/test_control.py)
CONTROL_FLOW_BACKENDS = [b for b in BACKENDS if OpKind.Scan in get_backend(b).SUPPORTED_OPS]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *argv, timeout=600):
    """Runs examples/`name` against this checkout's rlx_jax (a script's own directory comes
    first on sys.path, so the checkout is put on PYTHONPATH ahead of any installed copy)."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *argv],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, f"{name} {argv} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_quickstart(backend):
    out = run_example("quickstart.py", "--backend", backend)
    assert f"backend: {backend}" in out
    assert out.strip().endswith("ok")


def test_quickstart_auto_picks_first_available():
    out = run_example("quickstart.py", "--steps", "50")
    assert f"backend: {BACKENDS[0]}" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_transformer(backend):
    """The rlx_jax.nn language model trains on every backend; on Core ML also with every
    backward kind decomposed (the example asserts the loss falls)."""
    runs = [[]] + ([["--no-native-backward"]] if backend == "coreml" else [])
    for extra in runs:
        out = run_example("train_transformer.py", "--backend", backend, "--steps", "20", *extra)
        assert f"backend: {backend}" in out and out.strip().endswith("ok")


@pytest.mark.parametrize("backend", CONTROL_FLOW_BACKENDS)
def test_rnn(backend):
    """lax.scan over time, a fori_loop gradient accumulation and optax's Adam in one program:
    the loss falls and the gradients match jax.grad (the example asserts both)."""
    out = run_example("rnn.py", "--backend", backend, "--steps", "30")
    assert f"backend: {backend}" in out and "gradients match jax.grad" in out
    assert out.strip().endswith("ok")


@pytest.mark.skipif("coreml" not in BACKENDS, reason="the picture is of a Core ML placement")
def test_placement_picture_is_current(tmp_path):
    """examples/placement_picture.py (it checks the step's loss against jax.jit) writes the
    segments DOT of a flax LM step with a host op; every line of every box it draws is in the
    docs' committed SVG (docs/img/flax-lm-placement.svg), so the picture shows this release."""
    import html
    import re
    out = tmp_path / "picture"
    run_example("placement_picture.py", "--out", str(out))
    dot = (tmp_path / "picture.dot").read_text()
    labels = re.findall(r'^  s\d+ \[.*label="(.*)"\];$', dot, flags=re.M)
    assert len(labels) == 3 and "segment 1: host (xla), 1 op(s)" in labels[1]
    svg = (tmp_path.parents[0] / ROOT / "docs" / "img" / "flax-lm-placement.svg").read_text()
    texts = {html.unescape(t) for t in re.findall(r">([^<>]+)</text>", svg)}
    missing = [line for label in labels for line in label.split("\\n") if line not in texts]
    assert not missing, f"docs/img/flax-lm-placement.svg is stale; rerun the example: {missing}"
