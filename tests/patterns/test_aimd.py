"""``AIMDBulkhead``: additive increase, multiplicative decrease, bounded, once per interval."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.engine import SimulatedClock
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import AIMDBulkhead, AIMDConfig


def config(**overrides: object) -> AIMDConfig:
    """A small adaptive range: 2..8 starting at 4, target 100 ms, interval 1 s."""
    values: dict[str, object] = {
        "min_limit": 2,
        "max_limit": 8,
        "initial_limit": 4,
        "target_latency_s": 0.1,
        "interval_s": 1.0,
    }
    values.update(overrides)
    return AIMDConfig(**values)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(1, 5),
    span=st.integers(0, 20),
    factor=st.floats(0.05, 0.95),
    increase=st.integers(1, 5),
    outcomes=st.lists(st.tuples(st.floats(0, 2), st.floats(0, 0.3), st.booleans()), max_size=80),
)
def test_the_limit_stays_within_bounds_and_moves_once_per_interval(
    low: int,
    span: int,
    factor: float,
    increase: int,
    outcomes: list[tuple[float, float, bool]],
) -> None:
    """Whatever the outcomes, the limit stays in [min, max] and changes at most once an interval."""
    clock = SimulatedClock()
    guard = AIMDBulkhead(
        AIMDConfig(
            min_limit=low,
            max_limit=low + span,
            decrease_factor=factor,
            increase=increase,
            target_latency_s=0.1,
            interval_s=0.5,
        ),
        clock=clock,
    )
    last_change = -1.0
    for gap, latency, failed in outcomes:
        clock.increment(gap * 1000)
        before = guard.max_concurrent
        after = guard.record_outcome(latency, failed=failed)
        assert low <= after <= low + span
        if after != before:
            now = clock.now() / 1000
            assert now - last_change >= 0.5
            last_change = now
            assert after == (
                max(low, int(before * factor))
                if after < before
                else min(low + span, before + increase)
            )


def test_fast_successes_add_one_slot_per_interval() -> None:
    """An interval of fast calls raises the limit by ``increase``, not by the number of calls."""
    clock = SimulatedClock()
    guard = AIMDBulkhead(config(), clock=clock)
    for _ in range(50):
        guard.record_outcome(0.01)
    assert guard.max_concurrent == 4
    clock.increment(1000)
    assert guard.record_outcome(0.01) == 5


def test_an_error_halves_the_limit() -> None:
    """One failure in the interval multiplies the limit by ``decrease_factor``."""
    clock = SimulatedClock()
    guard = AIMDBulkhead(config(initial_limit=8), clock=clock)
    guard.record_outcome(0.01)
    guard.record_outcome(0.01, failed=True)
    clock.increment(1000)
    assert guard.record_outcome(0.01) == 4


def test_slow_calls_count_like_errors_and_the_floor_holds() -> None:
    """Calls over the target latency shrink the limit, never below ``min_limit``."""
    clock = SimulatedClock()
    guard = AIMDBulkhead(config(), clock=clock)
    for _ in range(5):
        clock.increment(1000)
        guard.record_outcome(0.5)
    assert guard.max_concurrent == 2


def test_an_adjustment_is_a_fact() -> None:
    """Each change of limit emits ``BULKHEAD_ADJUSTED`` with old, new and why."""
    seen = []
    stop = subscribe(seen.append)
    try:
        clock = SimulatedClock()
        guard = AIMDBulkhead(config(), name="search", clock=clock)
        clock.increment(1000)
        guard.record_outcome(0.01)
    finally:
        stop()
    facts = [dict(f.fields) for f in seen if f.kind is FactKind.BULKHEAD_ADJUSTED]
    assert facts == [{"bulkhead": "search", "from_limit": 4, "to_limit": 5, "reason": "increase"}]


def test_a_raised_limit_lets_waiters_in() -> None:
    """Threads queued on a full bulkhead start as soon as the limit grows."""
    clock = SimulatedClock()
    guard = AIMDBulkhead(config(min_limit=1, initial_limit=1, queue_size=2), clock=clock)
    guard.acquire()
    entered = threading.Event()

    def waiter() -> None:
        guard.acquire()
        entered.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 2
    while guard.get_stats().queued == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    clock.increment(1000)
    guard.record_outcome(0.01)
    assert entered.wait(2)
    thread.join(timeout=2)
    assert guard.get_stats().active == 2


def test_call_and_with_blocks_report_their_outcomes() -> None:
    """``call``, ``with`` and ``async with`` time the body and count its errors."""
    guard = AIMDBulkhead(config(initial_limit=8, interval_s=0.05, target_latency_s=1))
    with pytest.raises(ValueError):
        guard.call(lambda: int("x"))
    time.sleep(0.06)
    with guard:
        pass
    assert guard.max_concurrent == 4

    async def main() -> None:
        await asyncio.sleep(0.06)
        async with guard:
            await asyncio.sleep(0)

    asyncio.run(main())
    assert guard.max_concurrent == 5


@pytest.mark.parametrize(
    "options",
    [
        {"min_limit": 0},
        {"min_limit": 5, "max_limit": 4},
        {"initial_limit": 101},
        {"decrease_factor": 1.0},
        {"interval_s": 0},
    ],
)
def test_bad_settings_are_refused(options: dict[str, float]) -> None:
    """Crossed bounds and out-of-range factors raise ``ValueError``."""
    with pytest.raises(ValueError):
        AIMDConfig(**options)  # type: ignore[arg-type]
