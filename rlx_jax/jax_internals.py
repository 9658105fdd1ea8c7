"""The JAX-internal modules rlx_jax reads, resolved for the installed JAX release.

JAX moves its private modules between releases; each entry lists where the releases rlx_jax
supports keep the module, newest first, and the first that imports is used. A release that
has none of them fails here, at import, naming the module, not later inside a trace.

  jax 0.10: jax._src.random is a package (core, prng, threefry2x32)
  jax 0.9:  the threefry functions and the PRNG machinery are in jax._src.prng, random_gamma_p
            and _gamma_impl in jax._src.random
"""
import importlib

import jax

LOCATIONS = {
    "threefry": ("jax._src.random.threefry2x32", "jax._src.prng"),
    "prng": ("jax._src.random.prng", "jax._src.prng"),
    "random_core": ("jax._src.random.core", "jax._src.random"),
    "array": ("jax._src.array",),     # ArrayImpl (arguments.py: a result's weak type)
    "config": ("jax._src.config",),   # threefry_partitionable as a context (ir/prng.py)
    "source_info": ("jax._src.source_info_util",),   # an eqn's user frame (frontend/trace.py)
    "windowed_reductions": ("jax._src.lax.windowed_reductions",),   # ir/reference.py
    "linalg": ("jax._src.lax.linalg",),                             # ir/reference_linalg.py
    # the conformance runner (rlx_jax/conformance/): jit and JAX's test helpers, swapped
    "api": ("jax._src.api",),
    "test_util": ("jax._src.test_util",),
    "core": ("jax._src.core",),
    "ad": ("jax._src.interpreters.ad",),       # primitive_linearizations (interop.py)
    "mlir": ("jax._src.interpreters.mlir",),   # register_lowering: tests' own primitives
    "pjit": ("jax._src.pjit",),
    "shape_poly": ("jax._src.export.shape_poly",),   # symbolic dimensions (ir/dims.py)
    "lax": ("jax._src.lax.lax",),     # weak types of traced results (backends/xla/direct.py)
    # batched_device_put (jax_arrays.py)
    "xla_client": ("jaxlib.xla_client", "jax._src.lib.xla_client"),
}


def module(name):
    """The installed JAX's module for LOCATIONS[name]."""
    for path in LOCATIONS[name]:
        try:
            return importlib.import_module(path)
        except ImportError:
            continue
    raise ImportError(f"rlx_jax does not know where jax {jax.__version__} keeps its {name} "
                      f"module (tried {', '.join(LOCATIONS[name])}); install a supported jax "
                      f"(see pyproject.toml)")
