import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

import rlx_jax  # noqa: E402

BACKENDS = rlx_jax.available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param
