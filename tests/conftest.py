import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

import rlx_jax  # noqa: E402

BACKENDS = rlx_jax.available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item._rlx_call_passed = report.passed


@pytest.fixture(autouse=True)
def _programs_ran_where_expected(request):
    """Every program a passing test compiled on mlx or coreml ran on the device (and through
    mx.compile on MLX) unless the test says otherwise (tests/where_ran.py)."""
    from . import where_ran
    where_ran.reset()
    with rlx_jax.testing.recorded_programs() as programs:
        yield
    if not getattr(request.node, "_rlx_call_passed", False):
        return
    host = request.node.get_closest_marker("host")
    eager = request.node.get_closest_marker("eager")
    where_ran.check(programs, host=host and (host.args or ("marked",))[0],
                    eager=eager and (eager.args or ("marked",))[0],
                    host_backends=host.kwargs.get("backends", where_ran.DEVICE_BACKENDS)
                    if host else where_ran.DEVICE_BACKENDS)
