"""``RateLimiter``: the token bucket, its four entry points, stats and a shared backend."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import RateLimitExceededError, StoreUnavailableError
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import (
    Admission,
    MemoryRateLimitBackend,
    RateLimiter,
    RateSpec,
    SlidingWindowLimiter,
    TokenBucket,
    rate_limited,
)

steps = st.lists(
    st.tuples(st.floats(0, 2.0, allow_nan=False), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.5, 50),
    per=st.floats(0.1, 5),
    burst=st.floats(3, 20),
    script=steps,
)
def test_a_bucket_never_admits_more_than_burst_plus_rate_times_t(
    rate: float, per: float, burst: float, script: list[tuple[float, float]]
) -> None:
    """Over any span [t_i, t_j], the admitted cost is at most burst + rate/per * (t_j - t_i)."""
    bucket = TokenBucket(burst, rate / per, 0.0)
    now, admitted = 0.0, []
    for gap, cost in script:
        now += gap
        if bucket.take(cost, now).allowed:
            admitted.append((now, cost))
    for i, (start, _) in enumerate(admitted):
        total = 0.0
        for end, cost in admitted[i:]:
            total += cost
            assert total <= burst + rate / per * (end - start) + 1e-6


@settings(max_examples=100, deadline=None)
@given(rate=st.floats(0.5, 50), burst=st.floats(1, 20), cost=st.floats(0.1, 1))
def test_waiting_retry_after_is_always_enough(rate: float, burst: float, cost: float) -> None:
    """After a refusal, advancing by exactly ``retry_after_s`` admits the same cost."""
    bucket = TokenBucket(burst, rate, 0.0)
    bucket.take(burst, 0.0)
    refusal = bucket.take(cost, 0.0)
    assert not refusal.allowed
    assert bucket.take(cost, refusal.retry_after_s * (1 + 1e-9) + 1e-12).allowed


def test_burst_then_the_rate() -> None:
    """Ten per second with a burst of three: three at once, then one per 100 ms."""
    clock = SimulatedClock()
    limiter = RateLimiter(rate=10, per=1.0, burst=3, clock=clock)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.increment(100)
    assert [limiter.try_acquire() for _ in range(2)] == [True, False]


def test_burst_defaults_to_rate() -> None:
    """Without ``burst`` the bucket holds one period's worth of tokens."""
    limiter = RateLimiter(rate=4, per=60, clock=SimulatedClock())
    assert sum(limiter.try_acquire() for _ in range(10)) == 4


def test_stats_count_and_show_what_is_available() -> None:
    """``get_stats`` counts admissions and refusals and reads the refilled tokens."""
    clock = SimulatedClock()
    limiter = RateLimiter(rate=2, per=1, burst=2, name="api", clock=clock)
    for _ in range(3):
        limiter.try_acquire()
    clock.increment(250)
    stats = limiter.get_stats()
    assert (stats.name, stats.admitted, stats.rejected) == ("api", 2, 1)
    assert stats.available == pytest.approx(0.5)
    assert (stats.capacity, stats.rate_per_s) == (2, 2)


def test_reset_refills_and_zeroes() -> None:
    """``reset`` starts the bucket over, full, with zero counters."""
    limiter = RateLimiter(rate=1, per=60, burst=2, clock=SimulatedClock())
    limiter.try_acquire(2)
    limiter.reset()
    assert limiter.get_stats().admitted == 0
    assert limiter.try_acquire(2)


@pytest.mark.parametrize(
    ("options", "word"),
    [({"rate": 0}, "rate"), ({"rate": 1, "per": -1}, "per_s"), ({"rate": 1, "burst": 0}, "burst")],
)
def test_bad_numbers_are_refused_by_name(options: dict[str, float], word: str) -> None:
    """A rate, period or burst that is not positive is a ValueError naming it."""
    with pytest.raises(ValueError, match=word):
        RateLimiter(**options)


def test_a_cost_over_burst_is_an_error_not_a_wait() -> None:
    """A cost the bucket could never hold raises instead of blocking for ever."""
    with pytest.raises(ValueError, match="raise burst"):
        RateLimiter(rate=5, burst=2).acquire(3)


def test_acquire_waits_for_the_tokens() -> None:
    """A blocking ``acquire`` sleeps for the refill and then succeeds."""
    limiter = RateLimiter(rate=20, per=1, burst=1)
    limiter.try_acquire()
    started = time.monotonic()
    assert limiter.acquire(timeout=1.0)
    assert 0.03 <= time.monotonic() - started < 1.0


def test_acquire_gives_up_at_its_timeout() -> None:
    """A wait longer than the timeout returns False without sleeping through it."""
    limiter = RateLimiter(rate=1, per=10, burst=1)
    limiter.try_acquire()
    started = time.monotonic()
    assert limiter.acquire(timeout=0.5) is False
    assert time.monotonic() - started < 0.4


def test_real_threads_share_one_bucket() -> None:
    """Four threads acquiring for 0.6 s get at most burst + rate * elapsed tokens."""
    limiter = RateLimiter(rate=50, per=1, burst=5)
    counts = [0] * 4
    stop = time.monotonic() + 0.6
    started = time.monotonic()

    def worker(index: int) -> None:
        while time.monotonic() < stop:
            if limiter.acquire(timeout=max(0.0, stop - time.monotonic())):
                counts[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    elapsed = time.monotonic() - started
    assert 5 + 50 * 0.3 <= sum(counts) <= 5 + 50 * elapsed + 1


def test_asyncio_tasks_share_one_bucket() -> None:
    """Twenty tasks awaiting ``aacquire`` on 100/s with burst 5 take at least 0.15 s."""

    async def main() -> float:
        limiter = RateLimiter(rate=100, per=1, burst=5)
        started = time.monotonic()
        results = await asyncio.gather(*(limiter.aacquire(timeout=2) for _ in range(20)))
        assert all(results)
        assert not await limiter.atry_acquire()
        return time.monotonic() - started

    assert asyncio.run(main()) >= 0.14


def test_a_shared_backend_makes_two_limiters_one_limit() -> None:
    """Two limiters on one backend and key draw from the same bucket."""
    backend = MemoryRateLimitBackend()
    first = RateLimiter(rate=1, per=60, burst=3, backend=backend, key="shared")
    second = RateLimiter(rate=1, per=60, burst=3, backend=backend, key="shared")
    assert [first.try_acquire(), second.try_acquire(), first.try_acquire()] == [True] * 3
    assert not second.try_acquire()
    assert second.get_stats().available < 0.01


def test_async_through_a_backend() -> None:
    """``atry_acquire`` with a backend asks it off the loop and counts the answer."""
    limiter = RateLimiter(rate=1, per=60, burst=1, backend=MemoryRateLimitBackend())
    assert asyncio.run(limiter.atry_acquire()) is True
    assert asyncio.run(limiter.atry_acquire()) is False
    assert (limiter.get_stats().admitted, limiter.get_stats().rejected) == (1, 1)


def test_a_refusal_is_a_fact() -> None:
    """Each refusal emits ``LIMIT_REJECTED`` with the limiter's name and algorithm."""
    seen = []
    stop = subscribe(seen.append)
    try:
        limiter = RateLimiter(rate=1, per=60, burst=1, name="mail", clock=SimulatedClock())
        limiter.try_acquire()
        limiter.try_acquire()
    finally:
        stop()
    facts = [f for f in seen if f.kind is FactKind.LIMIT_REJECTED]
    assert [dict(f.fields) for f in facts] == [{"limiter": "mail", "algorithm": "token_bucket"}]


class DownBackend:
    """A backend whose service is down for the first ``failures`` calls (the limiter is under test)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.inner = MemoryRateLimitBackend()

    def acquire(self, key: str, cost: float, spec: RateSpec) -> Admission:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailableError("redis is down")
        return self.inner.acquire(key, cost, spec)

    def reset(self, key: str) -> None:
        self.inner.reset(key)


def test_an_outage_raises_by_default() -> None:
    """With ``on_unavailable='raise'`` the caller sees ``StoreUnavailableError``."""
    limiter = RateLimiter(rate=5, backend=DownBackend(1))
    with pytest.raises(StoreUnavailableError):
        limiter.try_acquire()
    assert limiter.try_acquire()


def test_fail_open_admits_warns_once_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    """Fail open: calls pass while the backend is down, one warning, counted, a fact each."""
    seen = []
    stop = subscribe(seen.append)
    try:
        limiter = RateLimiter(
            rate=1, per=60, burst=1, backend=DownBackend(3), on_unavailable="fail_open"
        )
        assert [limiter.try_acquire() for _ in range(5)] == [True, True, True, True, False]
    finally:
        stop()
    assert limiter.get_stats().unavailable == 3
    assert caplog.text.count("backend unavailable") == 1
    assert "reachable again" in caplog.text
    facts = [dict(f.fields) for f in seen if f.kind is FactKind.BACKEND_UNAVAILABLE]
    assert facts == [{"limiter": "RateLimiter", "choice": "fail_open"}] * 3


def test_fail_closed_refuses_with_a_wait() -> None:
    """Fail closed: calls are refused with a retry time while the backend is down."""
    limiter = SlidingWindowLimiter(
        rate=2, per=1, backend=DownBackend(1), on_unavailable="fail_closed"
    )
    refusal = limiter.decide()
    assert (refusal.allowed, refusal.retry_after_s) == (False, 0.5)
    assert limiter.try_acquire()


def test_an_unknown_outage_choice_is_refused() -> None:
    """A misspelt ``on_unavailable`` is a ValueError listing the choices."""
    with pytest.raises(ValueError, match="fail_closed"):
        RateLimiter(rate=1, on_unavailable="open")  # type: ignore[arg-type]


def test_the_throttle_decorator_refuses_with_a_wait() -> None:
    """``@rate_limited`` runs admitted calls and refuses the rest without running them."""
    calls = []
    limiter = RateLimiter(rate=1, per=10, burst=2, name="mail", clock=SimulatedClock())

    @rate_limited(limiter)
    def send(to: str) -> str:
        calls.append(to)
        return to

    assert [send("a"), send("b")] == ["a", "b"]
    with pytest.raises(RateLimitExceededError) as info:
        send("c")
    assert (info.value.name, info.value.retry_after_s) == ("mail", pytest.approx(10))
    assert calls == ["a", "b"]
    assert send.limiter is limiter  # type: ignore[attr-defined]


def test_the_throttle_decorator_waits_for_async_calls() -> None:
    """An ``async def`` under ``@rate_limited(wait_s=1)`` waits for its token."""
    limiter = RateLimiter(rate=20, per=1, burst=1)

    @rate_limited(limiter, wait_s=1.0)
    async def ping() -> int:
        return 1

    async def main() -> float:
        started = time.monotonic()
        assert [await ping(), await ping()] == [1, 1]
        return time.monotonic() - started

    assert asyncio.run(main()) >= 0.03
