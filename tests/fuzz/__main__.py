"""python -m tests.fuzz --backend mlx[,coreml,xla] --count 10000 --seed 0 [--grad-fraction 0.3]
[--out report.txt] [--json summary.json]: differential fuzzing against jax.jit on CPU."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from .cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
