"""``Bulkhead``: at most ``max_concurrent`` calls at once, a bounded queue, then rejection.

A dependency that slows down makes callers pile up on it until every thread (or every
Celery worker slot) is stuck there. A bulkhead caps the calls in flight, lets a bounded
number wait in line, and rejects the rest at once with ``BulkheadRejectedError`` so the
caller can shed load or defer instead of joining the pile.

Threads and asyncio tasks share one bulkhead: the counts live behind one ``threading``
lock, and waiters of both kinds stand in one FIFO line. A released slot is handed to the
first waiter directly (the count never dips), so a newcomer cannot overtake the line.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import ParamSpec, TypeVar

from xsm_celery.checks import BULKHEAD_MAX_WAIT_S, BULKHEAD_QUEUE_SIZE, CONCURRENCY_LIMIT
from xsm_celery.errors import BulkheadRejectedError, ConfigurationError, MisuseError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.limits.rate_limit import check_timeout
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = ["Bulkhead", "BulkheadConfig", "BulkheadStats", "bulkhead"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BulkheadConfig:
    """The limits of one bulkhead.

    Args:
        max_concurrent: Calls allowed to run at once (``checks.CONCURRENCY_LIMIT``).
        queue_size: Calls allowed to wait for a slot (``checks.BULKHEAD_QUEUE_SIZE``, from
            0); one more is rejected.
        max_wait_s: How long a queued call waits before it is rejected (None: no limit;
            else ``checks.BULKHEAD_MAX_WAIT_S``).

    Raises:
        ValueError: A limit is out of range; the message names it and the range.
    """

    max_concurrent: int = 10
    queue_size: int = 0
    max_wait_s: float | None = None

    def __post_init__(self) -> None:
        limit = CONCURRENCY_LIMIT.check_int("max_concurrent", self.max_concurrent)
        object.__setattr__(self, "max_concurrent", limit)
        queue = BULKHEAD_QUEUE_SIZE.check_int("queue_size", self.queue_size)
        object.__setattr__(self, "queue_size", queue)
        if self.max_wait_s is not None:
            wait = BULKHEAD_MAX_WAIT_S.check("max_wait_s", self.max_wait_s)
            object.__setattr__(self, "max_wait_s", wait)


@dataclass(frozen=True, slots=True)
class BulkheadStats:
    """A bulkhead's counts now and since it was built."""

    name: str
    max_concurrent: int
    active: int
    queued: int
    admitted: int
    rejected: int
    peak_active: int


class _Waiter:
    """One queued caller: a thread waiting on ``event`` or a task awaiting ``future``."""

    __slots__ = ("event", "future", "granted", "loop")

    def __init__(
        self,
        event: threading.Event | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self.event = event
        self.loop = loop
        self.future = future
        self.granted = False

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        elif self.loop is not None and self.future is not None:
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Bulkhead:
    """Cap concurrent calls, queue a bounded number, reject the rest with a clear error.

    Use it as ``with bulkhead:`` / ``async with bulkhead:``, through ``call`` / ``acall``,
    or as the ``@bulkhead(...)`` decorator. ``acquire`` and ``release`` are there for code
    whose start and end are in different places.

    Args:
        config: The limits (default: ``BulkheadConfig()``, ten at once, no queue).
        name: Shown in errors, stats and facts (default ``"bulkhead"``).
    """

    def __init__(self, config: BulkheadConfig | None = None, *, name: str | None = None) -> None:
        self.config = BulkheadConfig() if config is None else config
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self.name = name or "bulkhead"
        self._limit = self.config.max_concurrent
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()
        self._active = 0
        self._admitted = 0
        self._rejected = 0
        self._peak = 0

    @property
    def max_concurrent(self) -> int:
        """The current limit (an adaptive bulkhead moves it)."""
        return self._limit

    def acquire(self, timeout: float | None = None) -> None:
        """Take a slot, waiting in line up to ``timeout`` (default ``config.max_wait_s``).

        Raises:
            BulkheadRejectedError: The line is full, or the wait timed out.
        """
        budget = self._budget(timeout)
        with self._lock:
            if self._take_now():
                return
            waiter = self._enqueue(_Waiter(event=threading.Event()))
        if waiter is None:
            raise self._rejection()
        assert waiter.event is not None
        waiter.event.wait(budget)
        self._settle(waiter)

    async def aacquire(self, timeout: float | None = None) -> None:
        """Like ``acquire``, awaiting the slot so the event loop keeps running."""
        budget = self._budget(timeout)
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._take_now():
                return
            waiter = self._enqueue(_Waiter(loop=loop, future=loop.create_future()))
        if waiter is None:
            raise self._rejection()
        assert waiter.future is not None
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), budget)
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self.release()
            raise
        except TimeoutError:
            pass
        self._settle(waiter)

    def release(self) -> None:
        """Give a slot back; the first waiter in line gets it."""
        with self._lock:
            if self._active <= 0:
                raise MisuseError(
                    f"bulkhead '{self.name}' released more often than acquired; pair every "
                    "release() with one acquire()"
                )
            self._active -= 1
            self._grant_waiting()

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in a slot; the slot is released however ``fn`` ends."""
        self.acquire()
        try:
            return fn(*args, **kwargs)
        finally:
            self.release()

    async def acall(
        self, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Like ``call``, awaiting ``fn``'s result when it is awaitable."""
        await self.aacquire()
        try:
            result = fn(*args, **kwargs)
            if isinstance(result, Awaitable):
                result = await result
            return result
        finally:
            self.release()

    def get_stats(self) -> BulkheadStats:
        """Active and queued now; admitted, rejected and the peak since construction."""
        with self._lock:
            return BulkheadStats(
                name=self.name,
                max_concurrent=self._limit,
                active=self._active,
                queued=len(self._waiters),
                admitted=self._admitted,
                rejected=self._rejected,
                peak_active=self._peak,
            )

    def __enter__(self) -> Bulkhead:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    async def __aenter__(self) -> Bulkhead:
        await self.aacquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _set_limit(self, limit: int) -> None:
        """Move the limit (adaptive subclasses); a raise lets waiters in at once."""
        with self._lock:
            self._limit = limit
            self._grant_waiting()

    def _budget(self, timeout: float | None) -> float | None:
        if timeout is None:
            return self.config.max_wait_s
        return check_timeout(timeout)  # a call's own wait: None, 0 or more, inf allowed

    def _take_now(self) -> bool:
        """Under the lock: take a free slot if nobody is waiting for it."""
        if self._active < self._limit and not self._waiters:
            self._active += 1
            self._admitted += 1
            self._peak = max(self._peak, self._active)
            return True
        return False

    def _enqueue(self, waiter: _Waiter) -> _Waiter | None:
        """Under the lock: join the line; None (counted as rejected) when it is full."""
        if len(self._waiters) >= self.config.queue_size:
            self._rejected += 1
            return None
        self._waiters.append(waiter)
        return waiter

    def _settle(self, waiter: _Waiter) -> None:
        """After a wait: keep the slot if it was handed over, else leave the line, rejected."""
        with self._lock:
            if waiter.granted:
                return
            self._waiters.remove(waiter)
            self._rejected += 1
        raise self._rejection()

    def _grant_waiting(self) -> None:
        """Under the lock: hand free slots to the waiters at the front of the line."""
        while self._waiters and self._active < self._limit:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self._active += 1
            self._admitted += 1
            self._peak = max(self._peak, self._active)
            waiter.wake()

    def _rejection(self) -> BulkheadRejectedError:
        """The error for a refused caller, reported as a fact; called outside the lock."""
        emit(FactKind.LIMIT_REJECTED, limiter=self.name, algorithm="bulkhead")
        return BulkheadRejectedError(
            self.name, max_concurrent=self._limit, queue_size=self.config.queue_size
        )


def bulkhead(
    max_concurrent: int = 10,
    queue_size: int = 0,
    *,
    max_wait_s: float | None = None,
    name: str | None = None,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Give a function its own ``Bulkhead``, exposed as ``fn.bulkhead``.

    Works on plain and ``async def`` functions; the bulkhead is named after the function
    unless ``name=`` is given.
    """
    config = BulkheadConfig(max_concurrent, queue_size, max_wait_s)

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        guard = Bulkhead(config, name=name or fn.__qualname__)
        return wrap_calls(fn, guard.call, guard.acall, bulkhead=guard)

    return decorate
