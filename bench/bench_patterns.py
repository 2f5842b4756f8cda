"""Resilience patterns: breaker overhead per closed-state call, and the cost of delay_ms.

Breaker overhead is the time per ``breaker.call(noop)`` minus the time per plain ``noop()``,
measured for xsm_celery, pybreaker and xstate-statemachine 0.11.0 in the same run, on one
thread and on eight threads sharing one breaker (the per-call figure there is wall time
divided by the total number of calls, so lock contention shows up). ``delay_ms`` is timed
per jitter mode against the same mode's formula written by hand with the same rng (the
capped exponential times a draw for ``full``, half plus a drawn half for ``equal``, the
``[base, 3 * previous]`` draw for ``decorrelated``): the price of the policy's checks.

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


def _hand_written(mode: str, rng: Callable[[], float]) -> Callable[[], float]:
    """The delay after attempt 4 written by hand for ``mode``: what a user would inline."""
    base, cap, n, previous = 200.0, 30_000.0, 4, 1600.0
    if mode == "none":
        return lambda: min(cap, base * 2.0 ** (n - 1))
    if mode == "full":
        return lambda: rng() * min(cap, base * 2.0 ** (n - 1))
    if mode == "equal":

        def equal() -> float:
            exp = min(cap, base * 2.0 ** (n - 1))
            return exp / 2 + rng() * exp / 2

        return equal
    return lambda: min(cap, base + rng() * (min(cap, 3 * previous) - base))


def delay_rows() -> list[list[str]]:
    """Cost of one delay_ms call per jitter mode, against the same formula written by hand."""
    from xsm_celery.patterns import RetryPolicy

    rows = []
    for mode in ("none", "full", "equal", "decorrelated"):
        reference = per_call_us(_hand_written(mode, random.Random(1).random), number=CALLS)
        policy = RetryPolicy(jitter=mode, rng=random.Random(1).random)
        cost = per_call_us(lambda p=policy: p.delay_ms(4, previous_ms=1600.0), number=CALLS)
        rows.append(
            [f"jitter={mode}", f"{reference:.3f}", f"{cost:.3f}", f"{cost / reference:.2f}x"]
        )
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
    print("Retry delay after attempt 4 (us per call; ratio = RetryPolicy.delay_ms / by hand)")
    print(table(["mode", "by hand", "RetryPolicy.delay_ms", "ratio"], delay_rows()))
    print("target: ratio <= 2.00x in every mode")


if __name__ == "__main__":
    main()
