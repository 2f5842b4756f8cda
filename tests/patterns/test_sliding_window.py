"""``SlidingWindowLimiter``: no window of ``per`` seconds ever holds more than ``rate``."""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.engine import SimulatedClock
from xsm_celery.patterns import MemoryRateLimitBackend, SlidingWindow, SlidingWindowLimiter


@settings(max_examples=200, deadline=None)
@given(
    rate=st.integers(1, 10),
    per=st.floats(0.1, 3),
    script=st.lists(
        st.tuples(st.floats(0, 1.0, allow_nan=False), st.sampled_from([1.0, 2.0])), max_size=60
    ),
)
def test_no_window_ever_holds_more_than_rate(
    rate: int, per: float, script: list[tuple[float, float]]
) -> None:
    """For every admission at t, the admissions in (t - per, t] cost at most ``rate``."""
    window = SlidingWindow(rate, per)
    now, admitted = 0.0, []
    for gap, cost in script:
        now += gap
        if cost <= rate and window.take(cost, now).allowed:
            admitted.append((now, cost))
    for end, _ in admitted:
        assert sum(c for t, c in admitted if end - per < t <= end) <= rate


def test_a_refusal_waits_for_the_oldest_admission_to_leave() -> None:
    """Three per second at t=0, 0.4, 0.5: the fourth waits until t=1.0."""
    clock = SimulatedClock()
    limiter = SlidingWindowLimiter(rate=3, per=1.0, clock=clock)
    for gap in (0, 400, 100):
        clock.increment(gap)
        assert limiter.try_acquire()
    refusal = limiter.decide()
    assert not refusal.allowed
    assert abs(refusal.retry_after_s - 0.5) < 1e-9
    clock.increment(500)
    assert limiter.try_acquire()


def test_no_boundary_burst_at_low_rates() -> None:
    """Unlike a full bucket, a window never lets 2 x rate through around a boundary."""
    clock = SimulatedClock()
    limiter = SlidingWindowLimiter(rate=5, per=60, clock=clock)
    assert sum(limiter.try_acquire() for _ in range(5)) == 5
    clock.increment(59_000)
    assert not limiter.try_acquire()


def test_threads_and_tasks_share_the_window() -> None:
    """Eight threads and an asyncio task race for a window of six: six get through."""
    limiter = SlidingWindowLimiter(rate=6, per=60)
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(2):
            ok = limiter.try_acquire()
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    results.append(asyncio.run(limiter.atry_acquire()))
    assert sum(results) == 6
    stats = limiter.get_stats()
    assert (stats.admitted, stats.rejected, stats.available) == (6, 11, 0)


def test_a_backend_key_is_one_window_for_two_limiters() -> None:
    """Two limiters on one memory backend and key share the window."""
    backend = MemoryRateLimitBackend()
    first = SlidingWindowLimiter(rate=2, per=60, backend=backend, key="k")
    second = SlidingWindowLimiter(rate=2, per=60, backend=backend, key="k")
    assert [first.try_acquire(), second.try_acquire(), first.try_acquire()] == [True, True, False]
