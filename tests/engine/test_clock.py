"""Clocks: SimulatedClock moves only when told; WallClock reads the system clocks."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from xsm_celery import SimulatedClock
from xsm_celery.engine import RealClock, WallClock


def test_simulated_clock_starts_at_zero_and_moves_on_increment() -> None:
    """now() is in milliseconds and changes only through increment()."""
    clock = SimulatedClock()
    assert clock.now() == 0
    clock.increment(1500)
    clock.increment(0)
    assert clock.now() == 1500
    assert clock.is_simulated


def test_simulated_wall_time_follows_simulated_time() -> None:
    """wall_now() is wall_start plus the simulated time, in seconds."""
    clock = SimulatedClock(wall_start=1_000.0)
    clock.increment(2500)
    assert clock.wall_now() == pytest.approx(1_002.5)
    assert abs(SimulatedClock().wall_now() - time.time()) < 5


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf])
def test_increment_refuses_bad_values(bad: float) -> None:
    """Negative, NaN and infinite increments raise ValueError."""
    with pytest.raises(ValueError, match="finite"):
        SimulatedClock().increment(bad)


def test_call_later_callbacks_fire_in_due_order_and_can_be_cancelled() -> None:
    """Plain callbacks scheduled on the clock run in due order; cancelled ones never run."""
    clock = SimulatedClock()
    fired: list[tuple[str, float]] = []
    clock.call_later(300, lambda: fired.append(("c", clock.now())))
    clock.call_later(100, lambda: fired.append(("a", clock.now())))
    dropped = clock.call_later(200, lambda: fired.append(("b", clock.now())))
    dropped.cancel()
    assert clock.next_due() == 100
    clock.increment(1000)
    assert fired == [("a", 100), ("c", 300)]
    assert clock.next_due() is None


def test_advance_to_moves_forward_only() -> None:
    """advance_to() jumps to an absolute time and never goes back."""
    clock = SimulatedClock(start_ms=50)
    clock.advance_to(40)
    assert clock.now() == 50
    clock.advance_to(80)
    assert clock.now() == 80


def test_increment_is_awaitable() -> None:
    """increment() works both as a call and under await."""

    async def main() -> float:
        clock = SimulatedClock()
        await clock.increment(10)
        return clock.now()

    assert asyncio.run(main()) == 10


def test_wall_clock_reads_the_system() -> None:
    """WallClock.now() is monotonic milliseconds and wall_now() epoch seconds."""
    clock = WallClock()
    first = clock.now()
    assert clock.now() >= first
    assert abs(clock.wall_now() - time.time()) < 1
    assert not clock.is_simulated
    assert RealClock is WallClock
