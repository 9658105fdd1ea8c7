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


# ---- which cases the default run keeps (the rest run in the 'extended tests' CI step) ----

# A fresh run's time is mostly MLX's kernel builds and Core ML's package builds, one per new
# program. So the default run keeps, per test file, its first FILE_CASES[b] cases on mlx and
# on coreml, and per parametrized test function its first FUNCTION_CASES[b] cases on xla (the
# reference) and with no backend parameter. Every other case is marked `extended`: nothing is
# dropped, each case runs in exactly one of the two steps (`-m extended` runs the rest).
FILE_CASES = {"mlx": 1, "coreml": 2}
FUNCTION_CASES = {"xla": 2, None: 1}
_OTHER_STEPS = ("extended", "slow", "x64", "fuzz")


def _backend_of(item):
    params = getattr(item, "callspec", None)
    for value in (params.params.values() if params else ()):
        if isinstance(value, str) and value in ("mlx", "coreml", "xla"):
            return value
    return None


@pytest.hookimpl(tryfirst=True)        # before `-m` selects on the markers
def pytest_collection_modifyitems(config, items):
    seen = {}
    for item in items:
        if any(item.get_closest_marker(m) for m in _OTHER_STEPS):
            continue
        backend = _backend_of(item)
        if backend in FILE_CASES:
            key, limit = (item.path, backend), FILE_CASES[backend]
        elif hasattr(item, "callspec"):
            key, limit = (item.path, item.cls, item.originalname, backend), FUNCTION_CASES[backend]
        else:
            continue
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > limit:
            item.add_marker(pytest.mark.extended)
