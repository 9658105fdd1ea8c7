"""JAX's test files and their cases: which files a directory holds, the case ids of one file
(as JAX's own loader lists them), and the JAX release the files belong to."""
import importlib
import os
import re
import sys
import unittest

import jax

from ..jax_internals import module as jax_module

FILES = ("lax_test", "lax_autodiff_test", "lax_numpy_test", "lax_numpy_operators_test",
         "lax_numpy_reducers_test", "lax_numpy_indexing_test", "lax_control_flow_test",
         "nn_test", "random_lax_test", "random_test", "linalg_test", "fft_test",
         "lax_scipy_test", "lax_scipy_special_functions_test", "lax_vmap_test",
         "lax_vmap_op_test", "custom_api_test")


def test_dir(path):
    """The folder holding the test files: `path` itself, or `path/tests` of a JAX checkout."""
    for d in (path, os.path.join(path, "tests")):
        if os.path.isfile(os.path.join(d, "lax_test.py")):
            return os.path.abspath(d)
    raise SystemExit(f"--jax-tests {path}: no lax_test.py there or in its tests/ folder; "
                     f"name the folder of JAX's test files or a JAX checkout")


def release(path):
    """The JAX release of the test files: MANIFEST.txt's 'jax-vX.Y.Z' tag, or a checkout's
    jax/version.py; None when neither says."""
    manifest = os.path.join(path, "MANIFEST.txt")
    if os.path.isfile(manifest):
        m = re.search(r"jax-v(\d+\.\d+\.\d+)", open(manifest).read())
        if m:
            return m.group(1)
    version = os.path.join(os.path.dirname(path), "jax", "version.py")
    if os.path.isfile(version):
        m = re.search(r'_version(?:: str)? = "([^"]+)"', open(version).read())
        if m:
            return m.group(1)
    return None


def check_release(path, allow_mismatch=False):
    """Exits, saying why, when the installed jax is not the tests' release."""
    want = release(path)
    if want is None:
        msg = f"cannot tell which JAX release the tests in {path} belong to"
    elif want != jax.__version__:
        msg = (f"the tests in {path} are JAX {want}'s, the installed jax is "
               f"{jax.__version__}: install jax=={want} jaxlib=={want} (a test of another "
               f"release uses APIs this jax does not have)")
    else:
        return want
    if not allow_mismatch:
        raise SystemExit(msg + "; --allow-mismatch runs anyway")
    print("warning:", msg, file=sys.stderr)
    return want


def files_in(path, names=None):
    """The test files to run, in FILES order (or `names`, each checked to exist)."""
    names = names or [f for f in FILES if os.path.isfile(os.path.join(path, f + ".py"))]
    for n in names:
        if not os.path.isfile(os.path.join(path, n + ".py")):
            raise SystemExit(f"no {n}.py in {path}")
    return list(names)


def import_test_module(path, name):
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(name)


def _walk(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _walk(t)
        else:
            yield t


def case_ids(module):
    """'Class.method' of every case, as JAX's loader (jtu.JaxTestLoader) lists them."""
    jtu = jax_module("test_util")
    suite = jtu.JaxTestLoader().loadTestsFromModule(module)
    out = []
    for t in _walk(suite):
        if type(t).__module__.startswith("unittest"):   # a module that failed to load
            raise ImportError(f"{module.__name__}: {t.id()}")
        out.append(f"{type(t).__name__}.{t._testMethodName}")
    return out
