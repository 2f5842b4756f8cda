"""Clocks: where ``after`` timers get their time from.

Interpreters keep their own timers and register with their clock. A :class:`SimulatedClock`
moves only when told (``increment``), firing every due timer of every interpreter on it in due
order and delivering their thread-safe mailboxes, so tests need no sleeps. A
:class:`WallClock` reads the system clocks; a sync interpreter on it fires due timers on
``tick()`` or its next ``send()``, an async one schedules wake-ups on its event loop.
"""

from __future__ import annotations

import abc
import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol

from xsm_celery.errors import ConfigurationError, RunawayChainError

__all__ = [
    "Clock",
    "ClockParticipant",
    "RealClock",
    "SimulatedClock",
    "TimerHandle",
    "WallClock",
]

#: Timers one ``increment()`` may fire before a zero-delay cycle is declared a runaway.
MAX_FIRINGS_PER_INCREMENT = 100_000


class ClockParticipant(Protocol):
    """What a clock needs from an interpreter (or anything else with timers)."""

    def _clock_next_due(self) -> float | None: ...

    def _clock_fire(self, now_ms: float) -> None: ...

    def _clock_drain(self) -> bool: ...


class TimerHandle:
    """A callback scheduled with :meth:`SimulatedClock.call_later`; ``cancel()`` to drop it."""

    __slots__ = ("callback", "cancelled", "due")

    def __init__(self, due: float, callback: Callable[[], Any]) -> None:
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (a no-op once it ran)."""
        self.cancelled = True


class Clock(abc.ABC):
    """Base clock: ``now()`` in monotonic milliseconds, ``wall_now()`` in epoch seconds."""

    @abc.abstractmethod
    def now(self) -> float:
        """Monotonic time in milliseconds."""

    @abc.abstractmethod
    def wall_now(self) -> float:
        """Wall-clock time in epoch seconds (what snapshots and dead letters record)."""

    def attach(self, participant: ClockParticipant) -> None:  # noqa: B027
        """Register an interpreter whose timers this clock drives (by default, none)."""

    def detach(self, participant: ClockParticipant) -> None:  # noqa: B027
        """Forget an interpreter (it stopped); a no-op for clocks that drive none."""

    @property
    def is_simulated(self) -> bool:
        """Whether time only moves when told to."""
        return False


class WallClock(Clock):
    """The system clocks: ``time.monotonic`` for timers, ``time.time`` for the wall."""

    def now(self) -> float:
        return time.monotonic() * 1000.0

    def wall_now(self) -> float:
        return time.time()


#: 0.11.0's name for the wall clock.
RealClock = WallClock


class _Advance:
    """What ``increment()`` returns: already done, and awaitable for async callers.

    Awaiting it yields to the event loop a few times, so tasks woken by the timers that fired
    (an async service finishing, an actor's callback) get to run before the caller goes on.
    """

    __slots__ = ("_clock",)

    def __init__(self, clock: SimulatedClock) -> None:
        self._clock = clock

    def __await__(self) -> Generator[Any, None, None]:
        for _ in range(3):
            yield from asyncio.sleep(0).__await__()
            self._clock.increment(0)


class _CallbackTimers:
    """The clock's own timer list, for callers that schedule plain callbacks."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, TimerHandle]] = []
        self.seq = itertools.count()

    def _clock_next_due(self) -> float | None:
        heap = self.heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _clock_fire(self, now_ms: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now_ms:
            handle = heapq.heappop(heap)[2]
            if not handle.cancelled:
                handle.cancelled = True
                handle.callback()

    def _clock_drain(self) -> bool:
        return False


class SimulatedClock(Clock):
    """A clock that moves only when told: ``increment(ms)`` (also ``await clock.increment(ms)``).

    Args:
        wall_start: The wall time (epoch seconds) at simulated time 0; defaults to now, so
            snapshots taken on it carry realistic timestamps.
        start_ms: The initial monotonic reading.
    """

    def __init__(self, *, wall_start: float | None = None, start_ms: float = 0.0) -> None:
        self._now = float(start_ms)
        self._start = float(start_ms)
        self._wall_start = time.time() if wall_start is None else float(wall_start)
        self._participants: dict[int, Any] = {}
        self._callbacks = _CallbackTimers()
        self.attach(self._callbacks)

    @property
    def is_simulated(self) -> bool:
        return True

    def now(self) -> float:
        return self._now

    def wall_now(self) -> float:
        return self._wall_start + (self._now - self._start) / 1000.0

    def attach(self, participant: ClockParticipant) -> None:
        """Hold ``participant`` until it detaches, so its timers fire even if nobody else
        keeps it (``SyncInterpreter(m, clock=c).start()`` with the result discarded)."""
        self._participants[id(participant)] = participant

    def detach(self, participant: ClockParticipant) -> None:
        self._participants.pop(id(participant), None)

    def call_later(self, delay_ms: float, callback: Callable[[], Any]) -> TimerHandle:
        """Run ``callback`` once the clock has moved ``delay_ms`` on."""
        handle = TimerHandle(self._now + max(0.0, float(delay_ms)), callback)
        heapq.heappush(self._callbacks.heap, (handle.due, next(self._callbacks.seq), handle))
        return handle

    def next_due(self) -> float | None:
        """When the earliest pending timer of any attached interpreter is due, if any."""
        dues = [p._clock_next_due() for p in list(self._participants.values())]
        pending = [d for d in dues if d is not None]
        return min(pending) if pending else None

    def increment(self, ms: float) -> _Advance:
        """Move time on by ``ms``, firing due timers in order and draining mailboxes.

        Raises:
            ValueError: ``ms`` is negative or not finite.
            RunawayChainError: timers keep re-arming at zero delay without end.
        """
        ms = float(ms)
        if not math.isfinite(ms) or ms < 0:
            raise ConfigurationError(f"increment() needs a finite number of ms >= 0, got {ms!r}")
        self._advance_to(self._now + ms)
        return _Advance(self)

    def advance_to(self, now_ms: float) -> _Advance:
        """Move time to ``now_ms`` (no-op if that is in the past), like :meth:`increment`."""
        return self.increment(max(0.0, float(now_ms) - self._now))

    def _advance_to(self, target: float) -> None:
        fired = 0
        while True:
            fired += self._fire_until(target, fired)
            drained = False
            for participant in list(self._participants.values()):
                drained = participant._clock_drain() or drained
            if not drained and not self._any_due(target):
                break
        self._now = max(self._now, target)

    def _any_due(self, target: float) -> bool:
        for participant in list(self._participants.values()):
            due = participant._clock_next_due()
            if due is not None and due <= target:
                return True
        return False

    def _fire_until(self, target: float, already: int) -> int:
        fired = 0
        while True:
            best: Any = None
            best_due = math.inf
            for participant in list(self._participants.values()):
                due = participant._clock_next_due()
                if due is not None and due <= target and due < best_due:
                    best, best_due = participant, due
            if best is None:
                return fired
            self._now = max(self._now, best_due)
            best._clock_fire(self._now)
            fired += 1
            if already + fired > MAX_FIRINGS_PER_INCREMENT:
                raise RunawayChainError(
                    f"more than {MAX_FIRINGS_PER_INCREMENT} timers fired in one increment(); "
                    "a zero-delay 'after' cycle never lets time pass",
                    limit=MAX_FIRINGS_PER_INCREMENT,
                )
