"""Small timing helpers shared by the benchmarks (no timed assertions: these only print)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def per_call_us(fn: Callable[[], object], *, number: int, repeat: int = 5) -> float:
    """Median microseconds per call of ``fn`` over ``repeat`` runs of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(runs)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain fixed-width table, readable in a terminal and in a CI log."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
