"""Per-backend known divergences, merged: DIVERGENCES[backend][case name] -> Expect."""
import importlib

DIVERGENCES = {}
for _b in ("xla", "mlx", "coreml"):
    try:
        DIVERGENCES[_b] = importlib.import_module(f"tests.divergences_{_b}").DIVERGENCES
    except ModuleNotFoundError:
        DIVERGENCES[_b] = {}
