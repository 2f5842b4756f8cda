"""``RateLimiter``: a token bucket computed from elapsed time, for one process or a fleet.

The bucket needs no timer: each decision first adds ``elapsed * rate / per`` tokens (up to
``burst``), read from a monotonic clock, then takes the cost or says how long until it
could. So an idle limiter costs nothing, and the answer to a refusal is exact: the time the
missing tokens take to refill.

Every limiter has the same four ways in, for the two kinds of caller: ``try_acquire`` and
``acquire`` for threads (a Celery task body, a Django view), ``atry_acquire`` and
``aacquire`` for asyncio. With a ``RateLimitBackend`` (a Redis one makes the limit hold for
every worker) the decision is the backend's and the limiter only waits and counts.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from xsm_celery.checks import COST, WAIT_SECONDS
from xsm_celery.engine import Clock, WallClock
from xsm_celery.errors import ConfigurationError, RateLimitExceededError, StoreUnavailableError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.limits.protocols import (
    Admission,
    OutagePolicy,
    RateLimitBackend,
    RateSpec,
)
from xsm_celery.patterns.wrapping import wrap_calls

_log = logging.getLogger(__name__)

__all__ = [
    "BaseLimiter",
    "LimiterStats",
    "RateLimiter",
    "TokenBucket",
    "check_cost",
    "check_timeout",
    "rate_limited",
]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LimiterStats:
    """Counters of one limiter since it was built (or last reset), for dashboards and tests.

    ``available`` is what could be admitted now (tokens or window room); with a backend it
    is the ``remaining`` of the last answer, since asking would cost a round trip.
    ``unavailable`` counts decisions made without the backend because it was down.
    """

    name: str
    admitted: int
    rejected: int
    available: float
    capacity: float
    rate_per_s: float
    unavailable: int = 0


class TokenBucket:
    """One bucket's arithmetic, with time passed in; the caller holds any lock.

    Kept apart from ``RateLimiter`` so the memory backend can keep one per key and the
    property tests can drive it with any sequence of instants.
    """

    __slots__ = ("capacity", "rate_per_s", "tokens", "updated_s")

    def __init__(self, capacity: float, rate_per_s: float, now_s: float) -> None:
        self.capacity = capacity
        self.rate_per_s = rate_per_s
        self.tokens = capacity
        self.updated_s = now_s

    def refill(self, now_s: float) -> float:
        """Add the tokens earned since the last call (a clock going back adds none)."""
        elapsed = now_s - self.updated_s
        if elapsed > 0:
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
            self.updated_s = now_s
        return self.tokens

    def take(self, cost: float, now_s: float) -> Admission:
        """Take ``cost`` tokens if the bucket holds them now; else say when it will."""
        tokens = self.tokens
        elapsed = now_s - self.updated_s
        if elapsed > 0:
            tokens = self.tokens = min(self.capacity, tokens + elapsed * self.rate_per_s)
            self.updated_s = now_s
        if tokens >= cost:
            self.tokens = tokens - cost
            return Admission(True, 0.0, self.tokens)
        return Admission(False, (cost - tokens) / self.rate_per_s, tokens)


def check_cost(cost: object, capacity: float) -> float:
    """``cost`` as a float in ``(0, capacity]``; anything else could never be admitted."""
    value = COST.require("cost", cost)
    if value > capacity:
        raise ConfigurationError(
            f"cost {cost!r} is more than the limiter can ever admit at once ({capacity:g}); "
            "raise burst (or rate, for a sliding window) or split the work"
        )
    return value


def check_timeout(timeout: object) -> float | None:
    """``timeout`` in seconds: None waits as long as needed, 0 does not wait at all."""
    if timeout is None:
        return None
    return WAIT_SECONDS.require("timeout", timeout, advice="or None to wait as long as needed")


class BaseLimiter(abc.ABC):
    """What every in-process limiter shares: the four entry points, stats and the backend.

    Subclasses give the ``RateSpec`` and ``_decide_locally``, the algorithm run under the
    limiter's lock when no backend is configured.
    """

    kind = "rate_limit"

    def __init__(
        self,
        spec: RateSpec,
        *,
        name: str | None,
        backend: RateLimitBackend | None,
        key: str | None,
        clock: Clock | None,
        on_unavailable: OutagePolicy = "raise",
    ) -> None:
        if on_unavailable not in ("raise", "fail_open", "fail_closed"):
            raise ConfigurationError(
                "on_unavailable must be 'raise', 'fail_open' or 'fail_closed', "
                f"got {on_unavailable!r}"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self.spec = spec
        self.name: str = name or type(self).__name__
        self.key: str = key or self.name
        self.backend = backend
        self._clock: Clock = WallClock() if clock is None else clock
        self._now_s: Callable[[], float] = (
            time.monotonic if clock is None else lambda: self._clock.now() / 1000.0
        )
        self._lock = threading.Lock()
        self._admitted = 0
        self._rejected = 0
        self._last_remaining = spec.capacity
        self.on_unavailable: OutagePolicy = on_unavailable
        self._unavailable = 0
        self._in_outage = False

    def decide(self, cost: float = 1.0) -> Admission:
        """One admission decision for ``cost``, taken now, without waiting.

        Raises:
            ValueError: ``cost`` is not positive or more than the limiter can ever admit.
            StoreUnavailableError: The backend cannot be reached (nothing was counted).
        """
        if type(cost) not in (float, int) or not 0 < cost <= self.spec.capacity:
            cost = check_cost(cost, self.spec.capacity)  # raises the precise error
        if self.backend is None:
            with self._lock:
                admission = self._decide_locally(cost, self._now_s())
                if admission.allowed:
                    self._admitted += 1
                else:
                    self._rejected += 1
        else:
            admission = self._ask_backend(self.backend, cost)
            with self._lock:
                self._count(admission)
                self._last_remaining = admission.remaining
        if not admission.allowed:
            emit(FactKind.LIMIT_REJECTED, limiter=self.name, algorithm=self.kind)
        return admission

    def try_acquire(self, cost: float = 1.0) -> bool:
        """Take ``cost`` now if it is available; never waits."""
        return self.decide(cost).allowed

    def acquire(self, cost: float = 1.0, timeout: float | None = None) -> bool:
        """Take ``cost``, sleeping until it is available or ``timeout`` seconds have passed.

        Returns False when the timeout ran out first (like ``threading.Semaphore``); a
        ``timeout`` of None waits as long as the limit needs.
        """
        return self.admit(cost, timeout).allowed

    def admit(self, cost: float = 1.0, timeout: float | None = None) -> Admission:
        """Like ``acquire``, returning the last decision: a refusal says how long to wait."""
        budget = check_timeout(timeout)
        deadline = None if budget is None else time.monotonic() + budget
        while True:
            admission = self.decide(cost)
            if admission.allowed:
                return admission
            wait = _wait_s(admission, deadline)
            if wait is None:
                return admission
            time.sleep(wait)

    async def atry_acquire(self, cost: float = 1.0) -> bool:
        """Like ``try_acquire``; a backend's round trip runs off the event loop."""
        return (await self._adecide(cost)).allowed

    async def aacquire(self, cost: float = 1.0, timeout: float | None = None) -> bool:
        """Like ``acquire``, waiting with ``asyncio.sleep`` so the loop keeps running."""
        return (await self.aadmit(cost, timeout)).allowed

    async def aadmit(self, cost: float = 1.0, timeout: float | None = None) -> Admission:
        """Like ``admit``, waiting with ``asyncio.sleep``."""
        budget = check_timeout(timeout)
        deadline = None if budget is None else time.monotonic() + budget
        while True:
            admission = await self._adecide(cost)
            if admission.allowed:
                return admission
            wait = _wait_s(admission, deadline)
            if wait is None:
                return admission
            await asyncio.sleep(wait)

    def get_stats(self) -> LimiterStats:
        """Admitted and rejected counts, what is available now, capacity and rate."""
        with self._lock:
            if self.backend is None:
                available = self._available_locally(self._now_s())
            else:
                available = self._last_remaining
            return LimiterStats(
                name=self.name,
                admitted=self._admitted,
                rejected=self._rejected,
                available=available,
                capacity=self.spec.capacity,
                rate_per_s=self.spec.tokens_per_s,
                unavailable=self._unavailable,
            )

    def reset(self) -> None:
        """Refill the limit and zero the counters (and the backend's key, if any)."""
        if self.backend is not None:
            self.backend.reset(self.key)
        with self._lock:
            self._admitted = 0
            self._rejected = 0
            self._unavailable = 0
            self._last_remaining = self.spec.capacity
            self._reset_locally(self._now_s())

    def _ask_backend(self, backend: RateLimitBackend, cost: float) -> Admission:
        """The backend's answer, or the ``on_unavailable`` choice while it is down."""
        try:
            admission = backend.acquire(self.key, cost, self.spec)
        except StoreUnavailableError as exc:
            if self.on_unavailable == "raise":
                raise
            with self._lock:
                self._unavailable += 1
                first = not self._in_outage
                self._in_outage = True
            if first:
                _log.warning(
                    "rate limit %r: backend unavailable (%s); %s until it is back",
                    self.name,
                    exc,
                    "admitting every call"
                    if self.on_unavailable == "fail_open"
                    else "refusing every call",
                )
            emit(FactKind.BACKEND_UNAVAILABLE, limiter=self.name, choice=self.on_unavailable)
            if self.on_unavailable == "fail_open":
                return Admission(True, 0.0, 0.0)
            return Admission(False, cost / self.spec.tokens_per_s, 0.0)
        if self._in_outage:
            self._in_outage = False
            _log.warning("rate limit %r: backend reachable again", self.name)
        return admission

    async def _adecide(self, cost: float) -> Admission:
        if self.backend is None:
            return self.decide(cost)
        return await asyncio.to_thread(self.decide, cost)

    def _count(self, admission: Admission) -> None:
        if admission.allowed:
            self._admitted += 1
        else:
            self._rejected += 1

    @abc.abstractmethod
    def _decide_locally(self, cost: float, now_s: float) -> Admission:
        """Decide for ``cost`` at ``now_s`` on the in-process state, under the lock."""

    @abc.abstractmethod
    def _available_locally(self, now_s: float) -> float:
        """What the in-process state could admit at ``now_s``."""

    @abc.abstractmethod
    def _reset_locally(self, now_s: float) -> None:
        """Start the in-process state over, full, at ``now_s``."""


def _wait_s(admission: Admission, deadline: float | None) -> float | None:
    """How long to sleep before asking again, or None when the deadline leaves no time."""
    wait = max(admission.retry_after_s, 0.0005)
    if deadline is None:
        return wait
    left = deadline - time.monotonic()
    if left <= 0 or admission.retry_after_s > left:
        return None
    return wait


class RateLimiter(BaseLimiter):
    """A token bucket: ``rate`` calls per ``per`` seconds, with bursts of up to ``burst``.

    ``RateLimiter(rate=100, per=1.0, burst=200)`` admits 200 calls at once after an idle
    spell, then 100 a second. Give ``backend=`` (and ``key=``) to share the bucket with
    every process that uses the same backend and key.

    Args:
        rate: Tokens added per ``per`` seconds (finite, > 0).
        per: The period in seconds (finite, > 0).
        burst: Bucket size, the most admitted at once (default: ``rate``).
        name: Shown in stats, errors and facts (default: the class name).
        backend: Where the bucket lives; None keeps it in this process.
        key: The backend key (default: ``name``).
        clock: The engine clock; a ``SimulatedClock`` in tests, wall time by default.
        on_unavailable: With a backend that is down: ``"raise"`` its
            ``StoreUnavailableError``, ``"fail_open"`` (admit, warn once, count) or
            ``"fail_closed"`` (refuse, so callers wait or defer).

    Raises:
        ValueError: A number is out of range; the message names it.
    """

    kind = "token_bucket"

    def __init__(
        self,
        rate: float,
        per: float = 1.0,
        burst: float | None = None,
        *,
        name: str | None = None,
        backend: RateLimitBackend | None = None,
        key: str | None = None,
        clock: Clock | None = None,
        on_unavailable: OutagePolicy = "raise",
    ) -> None:
        spec = RateSpec(rate=rate, per_s=per, burst=burst, algorithm="token_bucket")
        super().__init__(
            spec, name=name, backend=backend, key=key, clock=clock, on_unavailable=on_unavailable
        )
        self._bucket = TokenBucket(spec.capacity, spec.tokens_per_s, self._now_s())

    def _decide_locally(self, cost: float, now_s: float) -> Admission:
        return self._bucket.take(cost, now_s)

    def _available_locally(self, now_s: float) -> float:
        return self._bucket.refill(now_s)

    def _reset_locally(self, now_s: float) -> None:
        self._bucket = TokenBucket(self.spec.capacity, self.spec.tokens_per_s, now_s)


def rate_limited(
    limiter: BaseLimiter, *, cost: float = 1.0, wait_s: float | None = 0.0
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Admit each call of the decorated function through ``limiter`` (a throttle).

    A call waits up to ``wait_s`` for room (0: not at all; None: as long as needed), then
    raises ``RateLimitExceededError`` with ``retry_after_s`` without running. Works on
    plain and ``async def`` functions; the limiter is exposed as ``fn.limiter``.
    """
    budget = check_timeout(wait_s)

    def refuse(admission: Admission) -> RateLimitExceededError:
        return RateLimitExceededError(limiter.name, retry_after_s=admission.retry_after_s)

    def run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        admission = limiter.admit(cost, budget)
        if not admission.allowed:
            raise refuse(admission)
        return fn(*args, **kwargs)

    async def arun(fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        admission = await limiter.aadmit(cost, budget)
        if not admission.allowed:
            raise refuse(admission)
        return await fn(*args, **kwargs)

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        return wrap_calls(fn, run, arun, limiter=limiter)

    return decorate
