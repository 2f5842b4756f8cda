"""``AIMDBulkhead``: a bulkhead whose limit follows the dependency's health, like TCP's window.

A fixed limit is wrong twice: too low while the dependency is fast, too high once it
slows down. The adaptive bulkhead grows the limit by ``increase`` after an interval of
fast successes (additive increase) and multiplies it by ``decrease_factor`` after an
interval with an error or a call slower than ``target_latency_s`` (multiplicative
decrease), always within ``[min_limit, max_limit]`` and at most once per ``interval_s``,
so one slow call cannot collapse it and a burst of fast ones cannot inflate it.

``AimdParams`` is the one record of these numbers. The in-process ``AIMDConfig``, the
fleet's Redis pool (``xsm_celery.redis.concurrency.RedisSlots``) and the Celery task option
``AIMD`` all build one, so the bounds are checked, and the step is taken, in one place.
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import ParamSpec, TypeVar

from xsm_celery.checks import (
    AIMD_DECREASE,
    AIMD_INCREASE,
    AIMD_INTERVAL_S,
    AIMD_LATENCY_TARGET_MS,
    AIMD_TARGET_LATENCY_S,
    BULKHEAD_MAX_WAIT_S,
    BULKHEAD_QUEUE_SIZE,
    CONCURRENCY_LIMIT,
)
from xsm_celery.engine import Clock, WallClock
from xsm_celery.errors import ConfigurationError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.limits.bulkhead import Bulkhead, BulkheadConfig

__all__ = ["AIMDBulkhead", "AIMDConfig", "AimdParams"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AimdParams:
    """How an adaptive limit moves: the parameters every AIMD pool shares.

    Args:
        initial: Where the limit starts, within the bounds.
        min_limit: The limit never goes below this (>= 1).
        max_limit: ... nor above this.
        increase: Slots added after an interval of fast successes.
        decrease: Multiplier after an interval with an error or a slow call, in (0, 1).
        latency_target_ms: A call slower than this counts like an error (milliseconds,
            as the Redis script counts).
        interval_s: The limit moves at most once per this many seconds.

    Raises:
        ValueError: A value is outside its range in ``xsm_celery.checks`` (the message
            names it and the range) or the bounds are crossed.
    """

    initial: int = 4
    min_limit: int = 1
    max_limit: int = 64
    increase: int = 1
    decrease: float = 0.5
    latency_target_ms: float = 1_000.0
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("min_limit", "max_limit", "initial"):
            object.__setattr__(self, name, CONCURRENCY_LIMIT.check_int(name, getattr(self, name)))
        if not self.min_limit <= self.initial <= self.max_limit:
            raise ConfigurationError(
                "AIMD needs 1 <= min_limit <= initial <= max_limit, got "
                f"min_limit={self.min_limit}, initial={self.initial}, max_limit={self.max_limit}"
            )
        object.__setattr__(self, "increase", AIMD_INCREASE.check_int("increase", self.increase))
        AIMD_DECREASE.check("decrease", self.decrease)
        AIMD_LATENCY_TARGET_MS.check("latency_target_ms", self.latency_target_ms)
        AIMD_INTERVAL_S.check("interval_s", self.interval_s)

    def next_limit(self, limit: int, *, bad: bool) -> int:
        """The limit after an interval: multiplied down after a bad one, else one step up."""
        if bad:
            return max(self.min_limit, math.floor(limit * self.decrease))
        return min(self.max_limit, limit + self.increase)


@dataclass(frozen=True, slots=True)
class AIMDConfig:
    """How an ``AIMDBulkhead`` adapts; the defaults suit a call of tens of milliseconds.

    Args:
        min_limit: The limit never goes below this (>= 1).
        max_limit: ... nor above this (>= min_limit).
        initial_limit: Where it starts (default: ``min_limit``).
        target_latency_s: A call slower than this counts like an error.
        increase: Slots added after an interval of fast successes (>= 1).
        decrease_factor: Multiplier after a bad interval, in (0, 1).
        interval_s: The limit moves at most once per this many seconds.
        queue_size: Calls allowed to wait for a slot, as for ``BulkheadConfig``.
        max_wait_s: How long a queued call waits (None: no limit).

    The AIMD numbers are checked by the ``AimdParams`` they build (``params``); the three
    spelt differently here are checked first under the names given.

    Raises:
        ValueError: A value is outside its range in ``xsm_celery.checks`` (the message
            names it and the range) or the bounds are crossed.
    """

    min_limit: int = 1
    max_limit: int = 100
    initial_limit: int | None = None
    target_latency_s: float = 0.5
    increase: int = 1
    decrease_factor: float = 0.5
    interval_s: float = 1.0
    queue_size: int = 0
    max_wait_s: float | None = None
    #: The same numbers as the record every AIMD pool shares (set from the fields above).
    params: AimdParams = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.initial_limit is not None:
            CONCURRENCY_LIMIT.check_int("initial_limit", self.initial_limit)
        target_s = AIMD_TARGET_LATENCY_S.check("target_latency_s", self.target_latency_s)
        AIMD_DECREASE.check("decrease_factor", self.decrease_factor)
        params = AimdParams(
            initial=self.min_limit if self.initial_limit is None else self.initial_limit,
            min_limit=self.min_limit,
            max_limit=self.max_limit,
            increase=self.increase,
            decrease=self.decrease_factor,
            latency_target_ms=target_s * 1000.0,
            interval_s=self.interval_s,
        )
        object.__setattr__(self, "params", params)
        for name in ("min_limit", "max_limit", "increase"):
            object.__setattr__(self, name, getattr(params, name))
        object.__setattr__(self, "initial_limit", params.initial)
        queue = BULKHEAD_QUEUE_SIZE.check_int("queue_size", self.queue_size)
        object.__setattr__(self, "queue_size", queue)
        if self.max_wait_s is not None:
            wait = BULKHEAD_MAX_WAIT_S.check("max_wait_s", self.max_wait_s)
            object.__setattr__(self, "max_wait_s", wait)


class AIMDBulkhead(Bulkhead):
    """A ``Bulkhead`` whose ``max_concurrent`` adapts: additive increase, multiplicative decrease.

    ``call``, ``acall`` and the context managers time each call and report its outcome;
    code that uses ``acquire`` / ``release`` directly calls ``record_outcome`` itself.
    ``BaseException`` subclasses that are not ``Exception`` (cancellation, exit) are not
    the dependency's fault and are not counted.

    Args:
        config: How to adapt (default ``AIMDConfig()``).
        name: Shown in errors, stats and facts.
        clock: The engine clock timing calls and intervals; wall time by default.
    """

    def __init__(
        self,
        config: AIMDConfig | None = None,
        *,
        name: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.aimd = AIMDConfig() if config is None else config
        assert self.aimd.initial_limit is not None  # set in __post_init__
        super().__init__(
            BulkheadConfig(self.aimd.initial_limit, self.aimd.queue_size, self.aimd.max_wait_s),
            name=name or "aimd_bulkhead",
        )
        self._clock: Clock = WallClock() if clock is None else clock
        self._adapt_lock = threading.Lock()
        self._window_start = self._now_s()
        self._fast = 0
        self._bad = 0
        self._starts: contextvars.ContextVar[tuple[float, ...]] = contextvars.ContextVar(
            f"xsm_aimd_starts_{id(self)}", default=()
        )

    def record_outcome(self, latency_s: float, *, failed: bool = False) -> int:
        """Count one finished call and adjust the limit if an interval has passed; return it.

        The interval that just ended decides: any error or slow call shrinks the limit,
        otherwise at least one fast success grows it, otherwise (no calls) it stays.
        """
        bad = failed or latency_s > self.aimd.target_latency_s
        with self._adapt_lock:
            if bad:
                self._bad += 1
            else:
                self._fast += 1
            now = self._now_s()
            if now - self._window_start < self.aimd.interval_s:
                return self.max_concurrent
            old = self.max_concurrent
            new = self.aimd.params.next_limit(old, bad=self._bad > 0)
            reason = "decrease" if self._bad else "increase"
            self._window_start, self._fast, self._bad = now, 0, 0
        if new != old:
            self._set_limit(new)
            emit(
                FactKind.BULKHEAD_ADJUSTED,
                bulkhead=self.name,
                from_limit=old,
                to_limit=new,
                reason=reason,
            )
        return new

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in a slot and report its latency and outcome."""
        self.acquire()
        started = self._now_s()
        failed = False
        try:
            return fn(*args, **kwargs)
        except Exception:
            failed = True
            raise
        finally:
            self.release()
            self.record_outcome(self._now_s() - started, failed=failed)

    async def acall(
        self, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Like ``call``, awaiting ``fn``'s result when it is awaitable."""
        await self.aacquire()
        started = self._now_s()
        failed = False
        try:
            result = fn(*args, **kwargs)
            if isinstance(result, Awaitable):
                result = await result
            return result
        except Exception:
            failed = True
            raise
        finally:
            self.release()
            self.record_outcome(self._now_s() - started, failed=failed)

    def __enter__(self) -> AIMDBulkhead:
        self.acquire()
        self._starts.set((*self._starts.get(), self._now_s()))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc)

    async def __aenter__(self) -> AIMDBulkhead:
        await self.aacquire()
        self._starts.set((*self._starts.get(), self._now_s()))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc)

    def _finish(self, exc: BaseException | None) -> None:
        *outer, started = self._starts.get()
        self._starts.set(tuple(outer))
        self.release()
        if exc is None or isinstance(exc, Exception):
            self.record_outcome(self._now_s() - started, failed=exc is not None)

    def _now_s(self) -> float:
        return self._clock.now() / 1000.0
