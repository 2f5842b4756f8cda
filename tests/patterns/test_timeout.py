"""Timeouts and deadlines: sync and async, nested budgets, named timeouts."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from xsm_celery.errors import DeadlineExceededError, PolicyError
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import (
    Deadline,
    TimeoutManager,
    acall_with_timeout,
    call_with_timeout,
    current_deadline,
    deadline,
    with_timeout,
)


def test_a_sync_call_returns_its_value_in_time() -> None:
    """A call that finishes within its timeout returns what it returned."""
    assert call_with_timeout(lambda a, b: a + b, 1.0, 2, b=3) == 5


def test_a_sync_call_raises_its_own_error() -> None:
    """An exception from the call reaches the caller unchanged."""
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 1.0)


def test_a_slow_sync_call_is_abandoned_on_time() -> None:
    """A call past its timeout raises ``DeadlineExceededError`` (also a ``TimeoutError``) on time."""
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError) as info:
        call_with_timeout(release.wait, 0.05, 5)
    elapsed = time.monotonic() - started
    release.set()
    assert 0.04 <= elapsed < 1.5
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, PolicyError)
    assert info.value.timeout_s == 0.05


def test_a_slow_async_call_is_cancelled() -> None:
    """An awaited call past its timeout is cancelled and raises ``DeadlineExceededError``."""
    cancelled = []

    async def slow() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        with pytest.raises(DeadlineExceededError):
            await acall_with_timeout(slow, 0.05)

    asyncio.run(main())
    assert cancelled == [True]


def test_a_deadline_caps_every_call_inside_it() -> None:
    """Three 1 s calls under a 0.15 s deadline fail once the deadline is spent."""
    started = time.monotonic()
    with deadline(0.15, name="request") as budget:
        assert current_deadline() is budget
        call_with_timeout(time.sleep, 1.0, 0.1)
        with pytest.raises(DeadlineExceededError) as info:
            call_with_timeout(time.sleep, 5.0, 2.0)
    assert time.monotonic() - started < 1.0
    assert info.value.timeout_s == 0.15
    assert current_deadline() is None


def test_an_outer_sooner_deadline_wins() -> None:
    """A nested, longer deadline does not extend the outer one."""
    with deadline(0.1) as outer, deadline(10) as inner:
        assert inner is outer


def test_a_spent_deadline_refuses_without_running() -> None:
    """Once the deadline has passed, a call is refused before it starts."""
    ran = []
    with deadline(0.01) as budget:
        time.sleep(0.02)
        assert budget.expired
        with pytest.raises(DeadlineExceededError):
            call_with_timeout(lambda: ran.append(1), None)
        with pytest.raises(DeadlineExceededError):
            budget.check()
    assert ran == []


def test_no_timeout_and_no_deadline_is_an_error() -> None:
    """``timeout_s=None`` outside any deadline says what to pass."""
    with pytest.raises(ValueError, match="with deadline"):
        call_with_timeout(lambda: 1, None)


def test_the_decorator_times_sync_and_async_functions() -> None:
    """``@with_timeout`` works on both kinds of function and keeps their names."""

    @with_timeout(0.05)
    def slow_sync() -> None:
        time.sleep(0.5)

    @with_timeout(0.05, name="fetch")
    async def slow_async() -> None:
        await asyncio.sleep(5)

    with pytest.raises(DeadlineExceededError, match="slow_sync"):
        slow_sync()
    with pytest.raises(DeadlineExceededError, match="'fetch'"):
        asyncio.run(slow_async())
    assert slow_sync.__name__ == "slow_sync"


def test_named_timeouts() -> None:
    """``TimeoutManager`` looks timeouts up by name, with a default and a clear miss."""
    manager = TimeoutManager({"db": 0.05}, default_s=1.0)
    assert manager.get("http") == 1.0
    with pytest.raises(DeadlineExceededError, match="'db'"):
        manager.call("db", time.sleep, 0.5)
    assert asyncio.run(manager.acall("http", asyncio.sleep, 0, "ok")) == "ok"
    with pytest.raises(KeyError, match="known: db"):
        TimeoutManager({"db": 1}).get("http")
    with pytest.raises(ValueError, match="timeout 'db'"):
        TimeoutManager({"db": 0})


def test_an_expired_timeout_is_a_fact() -> None:
    """Each expiry emits ``DEADLINE_EXCEEDED`` naming the call."""
    seen = []
    stop = subscribe(seen.append)
    try:
        with pytest.raises(DeadlineExceededError):
            TimeoutManager({"db": 0.02}).call("db", time.sleep, 0.3)
    finally:
        stop()
    assert [dict(f.fields) for f in seen if f.kind is FactKind.DEADLINE_EXCEEDED] == [
        {"call": "db"}
    ]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True])
def test_bad_budgets_are_refused(bad: float) -> None:
    """A budget that is not finite and positive is a ``ValueError``."""
    with pytest.raises(ValueError):
        Deadline(bad)
