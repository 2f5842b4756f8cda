"""Resilience patterns: breaker overhead per closed-state call, and the cost of delay_ms.

Breaker overhead is the time per ``breaker.call(noop)`` minus the time per plain ``noop()``,
measured for xsm_celery, pybreaker and xstate-statemachine 0.11.0 in the same run, on one
thread and on eight threads sharing one breaker (the per-call figure there is wall time
divided by the total number of calls, so lock contention shows up). ``delay_ms`` is timed
per jitter mode against a hand-written ``min(cap, base * 2 ** n)``.

Run: ``python -m bench.bench_patterns``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from bench.timing import per_call_us, table

CALLS = 200_000
THREADS = 8


def _noop() -> int:
    return 1


def _breakers() -> dict[str, Callable[[], object]]:
    """name -> a zero-argument function making one protected call of ``_noop``."""
    from xsm_celery.patterns import CircuitBreaker

    ours = CircuitBreaker(failure_threshold=5, cooldown_ms=30_000)
    found: dict[str, Callable[[], object]] = {"xsm_celery": lambda: ours.call(_noop)}
    try:
        import pybreaker

        theirs = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30)
        found["pybreaker"] = lambda: theirs.call(_noop)
    except ImportError:
        print("pybreaker is not installed; skipped")
    try:
        from xstate_statemachine.patterns import CircuitBreaker as UpstreamBreaker

        upstream = UpstreamBreaker(failure_threshold=5, cooldown_ms=30_000)
        found["xstate-statemachine 0.11.0"] = lambda: upstream.call(_noop)
    except ImportError:
        print("xstate-statemachine is not installed; skipped")
    return found


def _threaded_us(fn: Callable[[], object], *, threads: int, calls: int) -> float:
    """Wall microseconds per call with ``threads`` threads sharing the calls."""
    per_thread = calls // threads
    barrier = threading.Barrier(threads + 1)

    def run() -> None:
        barrier.wait()
        for _ in range(per_thread):
            fn()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return (time.perf_counter() - started) / (per_thread * threads) * 1e6


def breaker_rows() -> list[list[str]]:
    """One row per breaker: overhead at 1 and 8 threads, and ratios to xsm_celery."""
    base1 = per_call_us(_noop, number=CALLS)
    base8 = _threaded_us(_noop, threads=THREADS, calls=CALLS)
    measured = {}
    for name, fn in _breakers().items():
        one = max(per_call_us(fn, number=CALLS) - base1, 0.0)
        eight = max(_threaded_us(fn, threads=THREADS, calls=CALLS) - base8, 0.0)
        measured[name] = (one, eight)
    ours1, ours8 = measured["xsm_celery"]
    return [
        [
            name,
            f"{one:.2f}",
            f"{one / ours1:.1f}x" if ours1 else "-",
            f"{eight:.2f}",
            f"{eight / ours8:.1f}x" if ours8 else "-",
        ]
        for name, (one, eight) in measured.items()
    ]


def delay_rows() -> list[list[str]]:
    """Cost of one delay_ms call per jitter mode, against a plain capped exponential."""
    from xsm_celery.patterns import RetryPolicy

    def plain() -> float:
        return min(30_000.0, 200.0 * 2.0 ** (4 - 1))

    reference = per_call_us(plain, number=CALLS)
    rows = [["min(cap, base*2**n) by hand", f"{reference:.3f}", "1.0x"]]
    for mode in ("none", "full", "equal", "decorrelated"):
        policy = RetryPolicy(jitter=mode, rng=random.Random(1).random)
        cost = per_call_us(lambda p=policy: p.delay_ms(4), number=CALLS)
        rows.append([f"RetryPolicy.delay_ms jitter={mode}", f"{cost:.3f}", f"{cost / reference:.1f}x"])
    return rows


def main() -> None:
    """Print both tables."""
    print("Breaker overhead per closed-state call (us; ratio = peer / xsm_celery)")
    print(
        table(
            ["breaker", "1 thread", "vs xsm", f"{THREADS} threads", "vs xsm"],
            breaker_rows(),
        )
    )
    print()
    print("Retry delay computation (us per call; ratio = cost / hand-written formula)")
    print(table(["delay", "us/call", "ratio"], delay_rows()))


if __name__ == "__main__":
    main()
