"""Progress of long compiles, shown the way the ecosystem shows it: a `tqdm` bar on stderr
(tqdm is a dependency) that appears only once the work has run DELAY_S seconds and is
cleared when it ends, so a long compile shows progress and a short one prints nothing.

On when `RLX_JAX_PROGRESS=1`, off when `=0`; unset, on only when stderr is a terminal (never
under pytest's capture, in logs or in pipes). Where it is off nothing is drawn and no thread is
started. Used by the IR rewrites (recognition and legalization over a large graph, ir/rewrite.py),
MLX's kernel builds (backends/mlx/runtime.py: the kernel libraries built so far) and Core ML's
conversion (coremltools' own pass-pipeline bars, backends/coreml/package)."""
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

DELAY_S = 2.0            # a bar appears once its work has run this long
POLL_S = 0.25            # how often `watch` counts


def enabled() -> bool:
    """Whether progress is shown (see the module doc)."""
    setting = os.environ.get("RLX_JAX_PROGRESS", "auto").lower()
    if setting in ("1", "true", "yes", "on"):
        return True
    if setting in ("0", "false", "no", "off"):
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def bar(items: Iterable[T], desc: str, total: int | None = None, unit: str = "op") -> Iterable[T]:
    """`items`, with a delayed bar over them where progress is shown (else `items` itself)."""
    if not enabled():
        return items
    from tqdm import tqdm
    return tqdm(items, desc=f"rlx_jax: {desc}", total=total, unit=unit, delay=DELAY_S,
                leave=False, file=sys.stderr)


@contextlib.contextmanager
def watch(desc: str, count: Callable[[], int], unit: str = "kernel") -> Iterator[None]:
    """While the block runs (one blocking call, e.g. MLX building its kernels), a delayed bar
    shows `count()` as it grows, polled every POLL_S from a thread of its own."""
    if not enabled():
        yield
        return
    from tqdm import tqdm
    start, done, began = count(), threading.Event(), time.monotonic()
    shown = tqdm(desc=f"rlx_jax: {desc}", unit=unit, delay=DELAY_S, leave=False, file=sys.stderr)

    def poll() -> None:
        while not done.wait(POLL_S):
            shown.update(max(0, count() - start) - shown.n)
        shown.update(max(0, count() - start) - shown.n)
        if time.monotonic() - began >= DELAY_S:        # the last count, where a bar is up
            shown.refresh()
    thread = threading.Thread(target=poll, name="rlx_jax progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        shown.close()
