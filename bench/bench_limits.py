"""In-process limits: one rate-limiter admission and one bulkhead pass, next to their peers.

Rate limiters are timed on the admitting path (a limit far above the call rate, so every
call is admitted and the figure is pure bookkeeping): xsm_celery's token bucket, sliding
window and keyed memory backend, against the ``limits`` library's in-memory strategies
(fixed window, moving window, sliding window counter). Bulkheads are timed as the extra
cost of ``with guard: noop()`` over ``noop()``, against a bare ``threading.Semaphore``
used the same way, on one thread and on eight threads sharing one guard.

Run: ``python -m bench limits``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from bench.timing import per_call_us, table

CALLS = 100_000
THREADS = 8


def _noop() -> int:
    return 1


def _limiters() -> dict[str, Callable[[], object]]:
    """name -> one admission; every limit is at the ceiling of ``checks.RATE_PER_S``.

    A million a second: the bucket's burst alone covers a measurement's ``CALLS``, and the
    window (50 000 per 50 ms) is above the loop's pace of about 1.3 us per admission.
    """
    from xsm_celery.patterns import MemoryRateLimitBackend, RateLimiter, SlidingWindowLimiter

    bucket = RateLimiter(rate=1e6, per=1.0)
    window = SlidingWindowLimiter(rate=50_000, per=0.05)
    keyed = RateLimiter(rate=1e6, per=1.0, backend=MemoryRateLimitBackend(), key="bench")
    found: dict[str, Callable[[], object]] = {
        "xsm RateLimiter.try_acquire": bucket.try_acquire,
        "xsm SlidingWindowLimiter.try_acquire": window.try_acquire,
        "xsm RateLimiter + MemoryRateLimitBackend": keyed.try_acquire,
    }
    try:
        from limits import parse, storage, strategies
    except ImportError:
        print("limits is not installed; skipped (pip install 'limits>=3.0')")
        return found
    item = parse("1000000000/second")
    for label, strategy in (
        ("limits FixedWindowRateLimiter (memory)", strategies.FixedWindowRateLimiter),
        ("limits MovingWindowRateLimiter (memory)", strategies.MovingWindowRateLimiter),
        (
            "limits SlidingWindowCounterRateLimiter (memory)",
            strategies.SlidingWindowCounterRateLimiter,
        ),
    ):
        limiter = strategy(storage.MemoryStorage())
        found[label] = lambda lim=limiter: lim.hit(item, "bench")
    return found


def limiter_rows() -> list[list[str]]:
    """One row per limiter: microseconds per admission and the ratio to the token bucket."""
    measured = {name: per_call_us(fn, number=CALLS) for name, fn in _limiters().items()}
    ours = measured["xsm RateLimiter.try_acquire"]
    return [[name, f"{us:.2f}", f"{us / ours:.1f}x"] for name, us in measured.items()]


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


def _guards() -> dict[str, Callable[[], object]]:
    """name -> one guarded no-op call; limits wide enough that nobody waits."""
    from xsm_celery.patterns import AIMDBulkhead, AIMDConfig, Bulkhead, BulkheadConfig

    semaphore = threading.Semaphore(THREADS * 2)
    bulkhead = Bulkhead(BulkheadConfig(max_concurrent=THREADS * 2))
    aimd = AIMDBulkhead(AIMDConfig(min_limit=THREADS * 2, max_limit=THREADS * 4))

    def with_semaphore() -> int:
        with semaphore:
            return _noop()

    def with_bulkhead() -> int:
        with bulkhead:
            return _noop()

    return {
        "threading.Semaphore": with_semaphore,
        "xsm Bulkhead (with)": with_bulkhead,
        "xsm Bulkhead.call": lambda: bulkhead.call(_noop),
        "xsm AIMDBulkhead.call": lambda: aimd.call(_noop),
    }


def guard_rows() -> list[list[str]]:
    """One row per guard: overhead at 1 and 8 threads, and ratios to the bare semaphore."""
    base1 = per_call_us(_noop, number=CALLS)
    base8 = _threaded_us(_noop, threads=THREADS, calls=CALLS)
    measured = {}
    for name, fn in _guards().items():
        one = max(per_call_us(fn, number=CALLS) - base1, 0.0)
        eight = max(_threaded_us(fn, threads=THREADS, calls=CALLS) - base8, 0.0)
        measured[name] = (one, eight)
    sem1, sem8 = measured["threading.Semaphore"]
    return [
        [
            name,
            f"{one:.2f}",
            f"{one / sem1:.1f}x" if sem1 else "-",
            f"{eight:.2f}",
            f"{eight / sem8:.1f}x" if sem8 else "-",
        ]
        for name, (one, eight) in measured.items()
    ]


def main() -> None:
    """Print both tables."""
    print("Rate limiter admission (us per admitted call; ratio = limiter / xsm token bucket)")
    print(table(["limiter", "us/call", "ratio"], limiter_rows()))
    print()
    print("Bulkhead overhead per call (us over a bare call; ratio = guard / threading.Semaphore)")
    print(
        table(
            ["guard", "1 thread", "vs semaphore", f"{THREADS} threads", "vs semaphore"],
            guard_rows(),
        )
    )


if __name__ == "__main__":
    main()
