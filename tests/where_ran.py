"""Where each program a test compiles ran, checked after every test (conftest.py).

Every `Compiled` rlx_jax builds during a test is recorded (rlx_jax.testing.recorded_programs);
when the test has passed, each one on mlx or coreml must have run every op on the device and,
on MLX, through mx.compile. A test states what else it expects, with the reason:
  @pytest.mark.host("why")    its programs may place ops on the host (partition tests, f64 on
                              Core ML, ...); `backends=("coreml",)` narrows that to some
                              backends; or `expect_host(why)` from inside the test (a case
                              whose divergence entry says host)
  @pytest.mark.eager("why")   its MLX programs may run uncompiled (compile=False is always
                              allowed); or `expect_eager(why)`
"""
import pytest

import rlx_jax.testing

DEVICE_BACKENDS = ("mlx", "coreml")

# Reasons many tests share, as ready marks
COREML_KEY_BITS = pytest.mark.host(
    "threefry's uint32 bit operations: Core ML has no uint32 or bit ops, they run on the host",
    backends=("coreml",))
COREML_COLLECTIVES = pytest.mark.host(
    "collectives have no Core ML lowering: in a group of one they run on the host",
    backends=("coreml",))
_EXPECTED = {}


def expect_host(reason):
    """The current test's programs may run ops on the host, because `reason`."""
    assert reason, "say why the ops run on the host"
    _EXPECTED["host"] = reason


def expect_eager(reason):
    """The current test's MLX programs may run without mx.compile, because `reason`."""
    assert reason, "say why the program runs eagerly"
    _EXPECTED["eager"] = reason


def reset():
    _EXPECTED.clear()


def check(programs, host=None, eager=None, host_backends=DEVICE_BACKENDS):
    """AssertionError naming every recorded program that ran where the test did not expect.
    `host` / `eager`: the reasons the test gave (None: not allowed); `host_backends`: the
    backends whose programs the host reason covers."""
    host = host or _EXPECTED.get("host")
    eager = eager or _EXPECTED.get("eager")
    bad = []
    for c in programs:
        name = c.lowered.backend.name
        if name not in DEVICE_BACKENDS:
            continue
        try:
            may_host = bool(host) and name in host_backends   # allowed, not required
            on_host = may_host and rlx_jax.testing.ran_on_host(c)
            rlx_jax.testing.assert_ran_on_device(c, host=on_host, eager=bool(eager))
        except AssertionError as e:
            bad.append(str(e))
    if bad:
        raise AssertionError(
            f"{len(bad)} program(s) did not run where this test expects (mark it "
            f"@pytest.mark.host / @pytest.mark.eager with the reason if that is right):\n  "
            + "\n  ".join(bad[:10]))
