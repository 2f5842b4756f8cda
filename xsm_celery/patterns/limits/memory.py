"""Memory backends for the limit Protocols: one process's state, keyed like a fleet's.

They are the reference behaviour of ``RateLimitBackend`` and ``ConcurrencyBackend`` (the
contract suite runs against them first), and the right choice for several limiters in one
process that must share a key, or for tests. Time comes from the engine clock, so a
``SimulatedClock`` makes leases and refills deterministic.
"""

from __future__ import annotations

import threading

from xsm_celery.checks import CONCURRENCY_LIMIT, MEMORY_LEASE_S
from xsm_celery.engine import Clock, WallClock
from xsm_celery.patterns.limits.protocols import Admission, RateSpec
from xsm_celery.patterns.limits.rate_limit import TokenBucket, check_cost
from xsm_celery.patterns.limits.sliding_window import SlidingWindow

__all__ = ["MemoryConcurrencyBackend", "MemoryRateLimitBackend"]


class MemoryRateLimitBackend:
    """A ``RateLimitBackend`` holding one bucket or window per key, behind one lock.

    A key's state is built from the first spec it is used with; a later call with a
    different spec starts that key over, so a changed limit applies at once.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = WallClock() if clock is None else clock
        self._lock = threading.Lock()
        self._states: dict[str, tuple[RateSpec, TokenBucket | SlidingWindow]] = {}

    def acquire(self, key: str, cost: float, spec: RateSpec) -> Admission:
        """Take ``cost`` from ``key`` if available now, all or nothing."""
        cost = check_cost(cost, spec.capacity)
        now_s = self._clock.now() / 1000.0
        with self._lock:
            entry = self._states.get(key)
            if entry is None or entry[0] != spec:
                state: TokenBucket | SlidingWindow = (
                    SlidingWindow(spec.rate, spec.per_s)
                    if spec.algorithm == "sliding_window"
                    else TokenBucket(spec.capacity, spec.tokens_per_s, now_s)
                )
                self._states[key] = (spec, state)
            else:
                state = entry[1]
            return state.take(cost, now_s)

    def reset(self, key: str) -> None:
        """Forget ``key``; its next ``acquire`` starts full."""
        with self._lock:
            self._states.pop(key, None)


class MemoryConcurrencyBackend:
    """A ``ConcurrencyBackend`` of leased slots per key, behind one lock.

    Its leases may be far shorter than a Redis backend's (``checks.MEMORY_LEASE_S``, from
    1 ms): the holder renews in this process, on the same clock, with no round trip that
    could make a renewal late, so a lease only has to outlive the holder's own renewals.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = WallClock() if clock is None else clock
        self._lock = threading.Lock()
        self._slots: dict[str, dict[str, float]] = {}

    def acquire(self, key: str, holder: str, limit: int, lease_s: float) -> Admission:
        """Take one of ``limit`` slots for ``holder`` (or renew the one it has)."""
        limit = CONCURRENCY_LIMIT.check_int("limit", limit)
        lease = MEMORY_LEASE_S.check("lease_s", lease_s)
        now_s = self._now_s()
        with self._lock:
            holders = self._live(key, now_s)
            if holder in holders or len(holders) < limit:
                holders[holder] = now_s + lease
                return Admission(True, 0.0, float(max(0, limit - len(holders))))
            earliest = min(holders.values())
            return Admission(False, max(earliest - now_s, 1e-3), 0.0)

    def renew(self, key: str, holder: str, lease_s: float) -> bool:
        """Extend ``holder``'s lease; False when it expired or was never taken."""
        lease = MEMORY_LEASE_S.check("lease_s", lease_s)
        now_s = self._now_s()
        with self._lock:
            holders = self._live(key, now_s)
            if holder not in holders:
                return False
            holders[holder] = now_s + lease
            return True

    def release(self, key: str, holder: str) -> bool:
        """Free ``holder``'s slot; True if it held one."""
        with self._lock:
            holders = self._slots.get(key, {})
            held = holders.pop(holder, None) is not None
            if not holders:
                self._slots.pop(key, None)
            return held

    def in_use(self, key: str) -> int:
        """Slots of ``key`` held now, expired leases reclaimed first."""
        with self._lock:
            return len(self._live(key, self._now_s()))

    def _now_s(self) -> float:
        return self._clock.now() / 1000.0

    def _live(self, key: str, now_s: float) -> dict[str, float]:
        """``key``'s holders with unexpired leases; the expired ones are dropped."""
        holders = self._slots.setdefault(key, {})
        for name in [h for h, expires in holders.items() if expires <= now_s]:
            del holders[name]
        return holders
