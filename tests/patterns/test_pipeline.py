"""``ResiliencePipeline``: the stated order decides what each pattern sees."""

from __future__ import annotations

import asyncio
import time

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import CircuitOpenError, DeadlineExceededError, RateLimitExceededError
from xsm_celery.hooks import Fact, FactKind, subscribe
from xsm_celery.patterns import (
    Bulkhead,
    BulkheadConfig,
    CircuitBreaker,
    Fallback,
    RateLimiter,
    ResiliencePipeline,
    RetryPolicy,
)


def no_wait(attempts: int = 3) -> RetryPolicy:
    """A retry policy that does not sleep."""
    return RetryPolicy(max_attempts=attempts, base_ms=0, jitter="none")


class Failing:
    """Counts calls and fails every time."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        raise ConnectionError("down")


def test_a_breaker_outside_the_retry_counts_one_failure_per_call() -> None:
    """order=[circuit_breaker, retry]: three attempts are one failure to the breaker."""
    breaker = CircuitBreaker(failure_threshold=2, clock=SimulatedClock())
    pipeline = ResiliencePipeline(
        order=["circuit_breaker", "retry"], circuit_breaker=breaker, retry=no_wait()
    )
    target = Failing()
    with pytest.raises(Exception, match="gave up after 3"):
        pipeline.call(target)
    assert (target.calls, breaker.failures, breaker.state) == (3, 1, "closed")


def test_a_breaker_inside_the_retry_counts_every_attempt() -> None:
    """order=[retry, circuit_breaker]: the breaker opens mid-loop and stops the calls."""
    breaker = CircuitBreaker(failure_threshold=2, clock=SimulatedClock())
    pipeline = ResiliencePipeline(
        order=["retry", "circuit_breaker"], circuit_breaker=breaker, retry=no_wait()
    )
    target = Failing()
    with pytest.raises(Exception, match="gave up") as info:
        pipeline.call(target)
    assert isinstance(info.value.__cause__, CircuitOpenError)
    assert (target.calls, breaker.state) == (2, "open")


def test_the_seed_order_timeout_breaker_retry() -> None:
    """["timeout", "circuit_breaker", "retry"]: the timeout bounds the whole retry loop."""
    pipeline = ResiliencePipeline(
        order=["timeout", "circuit_breaker", "retry"],
        timeout_s=0.1,
        circuit_breaker=CircuitBreaker(),
        retry=RetryPolicy(max_attempts=50, base_ms=30, factor=1, jitter="none"),
    )
    seen = []
    stop = subscribe(seen.append)
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            pipeline.call(Failing())
        assert time.monotonic() - started < 1.0  # the loop alone would take 1.5 s
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not _gave_up(seen):
            time.sleep(0.01)
    finally:
        stop()
    assert _gave_up(seen) == [
        {"call": "Failing", "attempts": _gave_up(seen)[0]["attempts"], "reason": "deadline"}
    ]


def _gave_up(facts: list[Fact]) -> list[dict[str, object]]:
    """The ``RETRY_EXHAUSTED`` facts of the abandoned loop, which stops at the deadline."""
    return [
        dict(f.fields)
        for f in facts
        if f.kind is FactKind.RETRY_EXHAUSTED and f.fields.get("call") == "Failing"
    ]


def test_a_fallback_outermost_catches_what_the_others_raise() -> None:
    """A degraded value comes back when the rate limiter refuses."""
    limiter = RateLimiter(rate=1, per=60, burst=1, clock=SimulatedClock())
    pipeline = ResiliencePipeline(
        order=["fallback", "rate_limiter"],
        fallback=Fallback().degrade("busy"),
        rate_limiter=limiter,
    )
    assert pipeline.call(lambda: "fresh") == "fresh"
    assert pipeline.call(lambda: "fresh") == "busy"


def test_a_refused_rate_limit_says_when_to_come_back() -> None:
    """Without a fallback the caller gets ``RateLimitExceededError`` with ``retry_after_s``."""
    limiter = RateLimiter(rate=1, per=10, burst=1, clock=SimulatedClock(), name="geo")
    pipeline = ResiliencePipeline(rate_limiter=limiter)
    pipeline.call(lambda: None)
    with pytest.raises(RateLimitExceededError) as info:
        pipeline.call(lambda: None)
    assert (info.value.name, info.value.retry_after_s) == ("geo", pytest.approx(10))


def test_default_order_and_add() -> None:
    """Without ``order`` stages run in DEFAULT_ORDER; ``add`` appends innermost."""
    pipeline = ResiliencePipeline(bulkhead=Bulkhead(), retry=no_wait())
    assert pipeline.order == ("retry", "bulkhead")
    bigger = pipeline.add("timeout", 1.0)
    assert bigger.order == ("retry", "bulkhead", "timeout")
    assert pipeline.order == ("retry", "bulkhead")
    assert bigger.call(lambda: 5) == 5


def test_async_pipeline_runs_every_stage() -> None:
    """``acall`` and the decorator go through bulkhead, breaker, retry and timeout."""
    calls = []
    guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=10))
    pipeline = ResiliencePipeline(
        order=["bulkhead", "circuit_breaker", "retry", "timeout"],
        bulkhead=guard,
        circuit_breaker=CircuitBreaker(),
        retry=no_wait(),
        timeout_s=1.0,
    )

    @pipeline
    async def flaky() -> str:
        calls.append(1)
        await asyncio.sleep(0.001)
        if len(calls) % 2:
            raise ConnectionError("odd")
        return "ok"

    async def main() -> list[str]:
        return list(await asyncio.gather(flaky(), flaky()))

    assert asyncio.run(main()) == ["ok", "ok"]
    assert guard.get_stats().peak_active == 1


@pytest.mark.parametrize(
    ("options", "error", "word"),
    [
        ({"order": ["retry", "nope"], "retry": no_wait()}, ValueError, "unknown"),
        ({"order": ["retry", "retry"], "retry": no_wait()}, ValueError, "twice"),
        ({"order": ["retry", "timeout"], "retry": no_wait()}, ValueError, "timeout_s="),
        ({"order": ["retry"], "retry": no_wait(), "timeout_s": 1}, ValueError, "left out"),
        ({"retry": "fast"}, TypeError, "RetryPolicy"),
        ({"timeout_s": -1}, ValueError, "timeout_s"),
        ({"order": "retry", "retry": no_wait()}, TypeError, "list"),
    ],
)
def test_a_wrong_pipeline_is_refused_with_the_fix(
    options: dict[str, object], error: type[Exception], word: str
) -> None:
    """Unknown, repeated, missing and unused stages, and wrong policy types, are refused."""
    with pytest.raises(error, match=word):
        ResiliencePipeline(**options)  # type: ignore[arg-type]
