"""The conformance runner (rlx_jax.conformance) on a small JAX-style test file written here,
whose every case has a known outcome: the runner must report each one as exactly that."""
import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

FAKE = textwrap.dedent('''
    import os
    import unittest
    from absl.testing import absltest
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax._src import test_util as jtu
    from jax._src.interpreters import mlir

    jax.config.parse_flags_with_absl()


    class FakeTest(jtu.JaxTestCase):
      def testJitPasses(self):
        self.assertAllClose(jax.jit(lambda x: x * 2 + 1)(np.arange(3.0, dtype=np.float32)),
                            np.array([1.0, 3.0, 5.0], np.float32))

      def testCompileAndCheck(self):
        self._CompileAndCheck(jnp.sin, lambda: [np.linspace(0, 1, 5, dtype=np.float32)])

      def testRlxRuns(self):   # the function is compiled by rlx_jax, not by XLA
        f = jax.jit(lambda x: x + 1)
        self.assertIn("rlx_jax", type(f).__module__)

      def testNoJit(self):
        self.assertAllClose(jnp.ones(2) + 1, np.full(2, 2.0, np.float32))

      def testFailsEverywhere(self):
        self.assertEqual(jax.jit(lambda x: x)(1), 2)

      def testSkipped(self):
        raise unittest.SkipTest("not on this machine")

      def testCrash(self):   # crashes its worker, under rlx_jax only
        f = jax.jit(lambda x: x)
        if "rlx_jax" in type(f).__module__:
          os._exit(3)

      def testReadsStableHLO(self):   # passes under jax.jit: rlx_jax's text is its own IR
        self.assertIn("stablehlo.sine", jax.jit(jnp.sin).lower(1.0).as_text())

      def testCountsDispatch(self):   # JAX's C++ dispatch counter: JAX's internals
        f = jax.jit(lambda x: x + 1)
        with jtu.count_pjit_cpp_cache_miss() as count:
          f(1.0)
          f(1.0)
        self.assertEqual(count(), 1)
        self.assertIn("Pjit", type(f).__name__)   # fails under rlx_jax, after the counter

      def testDefinesALowering(self):   # its primitive's only meaning is an MLIR lowering
        p = jax.extend.core.Primitive("lowered_only")
        p.def_abstract_eval(lambda x: x)
        mlir.register_lowering(p, mlir.lower_fun(lambda x: x, multiple_results=False))
        f = jax.jit(lambda x: p.bind(x) + 1)
        self.assertNotIn("rlx_jax", type(f).__module__)

      def testRefused(self):   # an op rlx_jax refuses by name
        jax.jit(lambda x: jax.lax.rng_uniform(0.0, 1.0, (2,)))(1.0)


    if __name__ == "__main__":
      absltest.main(testLoader=jtu.JaxTestLoader())
''')

WANT = {"testJitPasses": "pass", "testCompileAndCheck": "pass", "testRlxRuns": "pass",
        "testNoJit": "no-rlx", "testFailsEverywhere": "jax-fails", "testSkipped": "skip",
        "testCrash": "fail", "testRefused": "fail",
        "testReadsStableHLO": "api", "testCountsDispatch": "api", "testDefinesALowering": "api"}


def _run(tmp_path, *extra, version=jax.__version__):
    (tmp_path / "lax_test.py").write_text(FAKE)
    (tmp_path / "MANIFEST.txt").write_text(f"# JAX's own tests at tag jax-v{version}\n")
    out = tmp_path / "results.jsonl"
    cmd = [sys.executable, "-m", "rlx_jax.conformance", "--backend", "xla", "--jax-tests",
           str(tmp_path), "--files", "lax_test", "--jobs", "2", "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))
    return proc, out


def test_every_outcome_is_reported_as_it_is(tmp_path):
    from rlx_jax.conformance import report
    proc, out = _run(tmp_path, "--require", "99")
    results = {json.loads(ln)["case"].split(".")[1]: json.loads(ln)
               for ln in out.read_text().splitlines()}
    assert {c: report.outcome(r) for c, r in results.items()} == WANT, proc.stderr[-3000:]
    assert results["testCrash"]["status"] == "crash"
    assert "exit 3" in results["testCrash"]["reason"]
    assert results["testRefused"]["exc"] == "UnsupportedPrimitiveError"
    assert results["testSkipped"]["reason"] == "not on this machine"
    assert results["testJitPasses"]["programs"] == 1
    # 3 passes of 5 applicable cases (the crash and the refusal fail): 60% < --require 99
    assert results["testDefinesALowering"]["mlir_lowerings"] == 1
    assert "| lax_test | 11 (11) | 3 | 2 | 60.00% | 1 | 1 | 1 | 3 |" in proc.stdout, proc.stdout
    assert proc.returncode == 1 and "below --require 99%" in proc.stderr


def test_another_release_is_refused(tmp_path):
    proc, _ = _run(tmp_path, version="0.0.1")
    assert proc.returncode != 0
    assert f"the installed jax is {jax.__version__}: install jax==0.0.1" in proc.stderr


@pytest.mark.parametrize("caller, moved", [("lax_test", True), ("jax._src.test_util", True),
                                           ("jax._src.numpy.lax_numpy", False),
                                           ("rlx_jax.backends.xla", False)])
def test_only_the_tests_jit_moves(caller, moved):
    from rlx_jax import api
    from rlx_jax.conformance.shim import Shim
    shim = Shim("xla", ["lax_test"]).install()
    try:
        scope = {"__name__": caller, "jax": jax}
        exec("made = jax.jit(lambda x: x + 1)", scope)
        assert isinstance(scope["made"], api.Jitted) is moved
        assert shim.jitted == int(moved)
    finally:
        Shim.uninstall()
    assert jax.jit is Shim.__init__.__globals__["_ORIGINAL"]["jax"]


def test_eager_moves_the_executions_outside_jit(tmp_path):
    # --eager: testNoJit's jnp.ones(2) + 1 runs as rlx_jax programs too
    from rlx_jax.conformance import report
    proc, out = _run(tmp_path, "-k", "NoJit", "--eager")
    (result,) = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert report.outcome(result) == "pass", proc.stderr[-3000:]
    assert result["eager_calls"] >= 1 and result["programs"] >= 1 and result["jitted"] == 0


def test_a_program_built_in_an_earlier_case_still_counts(tmp_path):
    # a module-level jitted function compiled by one case and only called by the next: both
    # ran rlx_jax programs (Compiled calls are counted, not only programs built)
    from rlx_jax.conformance import report
    (tmp_path / "lax_test.py").write_text(textwrap.dedent('''
        import numpy as np
        import jax
        from jax._src import test_util as jtu
        jax.config.parse_flags_with_absl()
        F = jax.jit(lambda x: x * 3)

        class ReuseTest(jtu.JaxTestCase):
          def testA(self):
            self.assertAllClose(F(np.float32(2)), np.float32(6))

          def testB(self):
            self.assertAllClose(F(np.float32(2)), np.float32(6))
    '''))
    (tmp_path / "MANIFEST.txt").write_text(f"# at tag jax-v{jax.__version__}\n")
    out = tmp_path / "r.jsonl"
    subprocess.run([sys.executable, "-m", "rlx_jax.conformance", "--backend", "xla",
                    "--jax-tests", str(tmp_path), "--jobs", "1", "--out", str(out)],
                   check=True, capture_output=True, timeout=600,
                   env=dict(os.environ, PYTHONPATH=os.getcwd()))
    results = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [report.outcome(r) for r in results] == ["pass", "pass"]
    assert sorted(r["programs"] for r in results) == [0, 1]
    assert all(r["calls"] == 1 for r in results)


def test_a_run_cut_off_goes_on_where_it_stopped(tmp_path):
    from rlx_jax.conformance import report
    proc, out = _run(tmp_path, "-k", "JitPasses")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = out.read_text()
    assert len(first.splitlines()) == 1
    with open(out, "a") as f:                  # a line a stopped run left half written
        f.write('{"file": "lax_test", "case": "FakeTest.testNoJ')
    proc, out = _run(tmp_path, "--resume")
    assert "10 cases from 1 files" in proc.stderr and "1 kept from" in proc.stderr, proc.stderr
    assert "an unreadable line is run again" in proc.stderr
    text = out.read_text().splitlines()
    assert text[1].endswith("testNoJ")             # the unfinished line stays as it was
    lines = [json.loads(ln) for ln in text[2:]]
    assert first.splitlines()[0] == out.read_text().splitlines()[0]    # kept, not rerun
    assert "FakeTest.testJitPasses" not in {r["case"] for r in lines}
    results = {r["case"].split(".")[1]: r for r in lines}
    assert {c: report.outcome(r) for c, r in results.items()} == \
        {c: w for c, w in WANT.items() if c != "testJitPasses"}
    # the report covers the kept case too; nothing is left to run the third time
    assert "| lax_test | 11 (11) | 3 | 2 | 60.00% |" in proc.stdout, proc.stdout
    proc, _ = _run(tmp_path, "--resume")
    assert "0 cases from 1 files" in proc.stderr and "11 kept" in proc.stderr
    assert "| lax_test | 11 (11) | 3 | 2 | 60.00% |" in proc.stdout
    proc, _ = _run(tmp_path, "--resume", "--retry-failures")    # the 6 failing ones again
    assert "6 cases from 1 files" in proc.stderr and "5 kept" in proc.stderr, proc.stderr
    assert "| lax_test | 11 (11) | 3 | 2 | 60.00% |" in proc.stdout
    proc, _ = _run(tmp_path, "--resume", "--eager")
    assert proc.returncode != 0 and "recorded with eager=False" in proc.stderr
