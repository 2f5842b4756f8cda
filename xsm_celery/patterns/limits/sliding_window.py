"""``SlidingWindowLimiter``: at most ``rate`` admissions in any window of ``per`` seconds.

A token bucket lets a full bucket go at once and then refills; at low rates ("5 per
minute") that allows nearly twice the rate across a minute boundary. The sliding window
keeps the time of every admission inside the window (a deque, pruned on each decision), so
no ``per``-second span ever holds more than ``rate``, at the cost of memory per admission.
"""

from __future__ import annotations

from collections import deque

from xsm_celery.engine import Clock
from xsm_celery.patterns.limits.protocols import (
    Admission,
    OutagePolicy,
    RateLimitBackend,
    RateSpec,
)
from xsm_celery.patterns.limits.rate_limit import BaseLimiter

__all__ = ["SlidingWindow", "SlidingWindowLimiter"]


class SlidingWindow:
    """One window's arithmetic, with time passed in; the caller holds any lock."""

    __slots__ = ("entries", "limit", "used", "window_s")

    def __init__(self, limit: float, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self.entries: deque[tuple[float, float]] = deque()
        self.used = 0.0

    def prune(self, now_s: float) -> float:
        """Drop admissions older than the window; return the room left."""
        horizon = now_s - self.window_s
        entries = self.entries
        while entries and entries[0][0] <= horizon:
            self.used -= entries.popleft()[1]
        if not entries:
            self.used = 0.0  # no float residue once the window is empty
        return self.limit - self.used

    def take(self, cost: float, now_s: float) -> Admission:
        """Admit ``cost`` if the window has room; else say when enough of it expires."""
        room = self.prune(now_s)
        if cost <= room:
            self.entries.append((now_s, cost))
            self.used += cost
            return Admission(True, 0.0, self.limit - self.used)
        freed = room
        for stamp, size in self.entries:
            freed += size
            if freed >= cost:
                return Admission(False, max(stamp + self.window_s - now_s, 1e-6), room)
        return Admission(False, self.window_s, room)  # unreachable while cost <= limit


class SlidingWindowLimiter(BaseLimiter):
    """At most ``rate`` calls in any ``per``-second window; more precise than a bucket at low rates.

    Same entry points as ``RateLimiter`` (``try_acquire``, ``acquire``, ``atry_acquire``,
    ``aacquire``, ``get_stats``, ``reset``), and the same ``backend=`` / ``key=`` /
    ``on_unavailable=`` to share the window with other processes.

    Raises:
        ValueError: ``rate`` or ``per`` is not finite and positive.
    """

    kind = "sliding_window"

    def __init__(
        self,
        rate: float,
        per: float = 1.0,
        *,
        name: str | None = None,
        backend: RateLimitBackend | None = None,
        key: str | None = None,
        clock: Clock | None = None,
        on_unavailable: OutagePolicy = "raise",
    ) -> None:
        spec = RateSpec(rate=rate, per_s=per, algorithm="sliding_window")
        super().__init__(
            spec, name=name, backend=backend, key=key, clock=clock, on_unavailable=on_unavailable
        )
        self._window = SlidingWindow(spec.rate, spec.per_s)

    def _decide_locally(self, cost: float, now_s: float) -> Admission:
        return self._window.take(cost, now_s)

    def _available_locally(self, now_s: float) -> float:
        return self._window.prune(now_s)

    def _reset_locally(self, now_s: float) -> None:
        self._window = SlidingWindow(self.spec.rate, self.spec.per_s)
