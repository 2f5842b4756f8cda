"""The fleet task options as values: ``RateLimit``, ``Concurrency`` and ``AIMD``.

Each checks itself when it is built, so a bad option fails where the task is defined, with
a message that says how to write it. ``fleet`` reads them off the task class.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from xsm_celery.checks import positive_int
from xsm_celery.errors import ConfigurationError

__all__ = ["AIMD", "Concurrency", "Key", "RateLimit", "RedisDown", "check_down", "parse_rate"]

#: What an option does while Redis is down: run the task anyway, or defer it.
RedisDown = Literal["open", "closed"]
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*(\d*(?:\.\d+)?)\s*([smh]))?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}

#: A limit's key: a shared name, a callable of the task's arguments, or None (the task).
Key = str | Callable[..., Any] | None


def check_down(value: object, option: str) -> RedisDown:
    if value not in ("open", "closed"):
        raise ConfigurationError(
            f"{option} on_redis_down={value!r} must be 'open' (run the task, warn and count) "
            "or 'closed' (defer it until Redis answers)"
        )
    return value


def parse_rate(rate: str | float) -> tuple[float, float]:
    """``"20/s"``, ``"100/m"``, ``"5/10s"``, ``"3/h"`` or a number per second, as (count, per_s).

    Raises:
        ConfigurationError: The rate cannot be read or is not > 0.
    """
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        if rate > 0 and math.isfinite(rate):
            return float(rate), 1.0
    elif isinstance(rate, str) and (match := _RATE.match(rate)):
        count, per, unit = match.groups()
        period = (float(per) if per else 1.0) * _UNIT_S[unit or "s"]
        if float(count) > 0 and period > 0:
            return float(count), period
    raise ConfigurationError(
        f"fleet rate {rate!r} is not a rate; write it as '20/s', '100/m', '5/10s', '3/h' or a "
        "number of calls per second greater than 0"
    )


@dataclass(frozen=True)
class RateLimit:
    """A fleet-wide rate: a token bucket with ``burst``, or a sliding window on request.

    Args:
        rate: ``"20/s"``, ``"100/m"``, ``"5/10s"``, ``"3/h"`` or calls per second.
        burst: Calls admitted at once after a quiet spell (bucket only; default: the rate
            per second, at least 1).
        key: A name shared by several tasks, or a callable of the task's arguments giving
            the part of the name that varies (a per-customer limit). Default: the task name.
        sliding: Use a sliding window (exact over any ``per`` stretch, no burst).
        on_redis_down: ``"open"`` runs the task with a warning, ``"closed"`` defers it.
    """

    rate: str | float
    burst: int | None = None
    key: Key = None
    sliding: bool = False
    on_redis_down: RedisDown = "open"
    count: float = field(init=False, repr=False)
    per_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        count, per = parse_rate(self.rate)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "per_s", per)
        if self.burst is not None and (isinstance(self.burst, bool) or self.burst < 1):
            raise ConfigurationError(f"RateLimit burst must be >= 1, got {self.burst!r}")
        if self.sliding and self.burst is not None:
            raise ConfigurationError("RateLimit(sliding=True) has no burst; remove burst=")
        _check_key(self.key, "RateLimit")
        check_down(self.on_redis_down, "RateLimit")


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` runs at once across the fleet, each holding a leased slot.

    Args:
        limit: Slots in the pool.
        key: As for ``RateLimit``.
        lease_s: How long a slot outlives a worker that died holding it (renewed every
            ``lease_s / 3`` while the task runs).
        on_redis_down: ``"closed"`` (default) defers the task, ``"open"`` runs it.
    """

    limit: int
    key: Key = None
    lease_s: float = 30.0
    on_redis_down: RedisDown = "closed"

    def __post_init__(self) -> None:
        positive_int("fleet_concurrency", self.limit)
        _check_lease(self.lease_s)
        _check_key(self.key, "Concurrency")
        check_down(self.on_redis_down, "Concurrency")


@dataclass(frozen=True)
class AIMD:
    """A fleet-wide concurrency limit that adapts: additive increase, multiplicative decrease.

    Each finished run reports its time and outcome; at most once per ``interval_s`` the
    shared limit grows by ``increase`` after a success faster than ``latency_target_ms``,
    or is multiplied by ``decrease`` after an error or a slow run, within
    [``min_limit``, ``max_limit``].
    """

    initial: int = 4
    min_limit: int = 1
    max_limit: int = 64
    increase: int = 1
    decrease: float = 0.5
    latency_target_ms: float = 1_000.0
    interval_s: float = 1.0
    key: Key = None
    lease_s: float = 30.0
    on_redis_down: RedisDown = "closed"

    def __post_init__(self) -> None:
        try:
            self.params()
        except ValueError as exc:
            raise ConfigurationError(f"fleet_concurrency=AIMD(...): {exc}") from None
        _check_lease(self.lease_s)
        _check_key(self.key, "AIMD")
        check_down(self.on_redis_down, "AIMD")

    def params(self) -> Any:
        """The Redis pool's parameters (``AimdParams``)."""
        from xsm_celery.redis.concurrency import AimdParams

        return AimdParams(
            initial=self.initial,
            min_limit=self.min_limit,
            max_limit=self.max_limit,
            increase=self.increase,
            decrease=self.decrease,
            latency_target_ms=self.latency_target_ms,
            interval_s=self.interval_s,
        )


def _check_key(key: Key, option: str) -> None:
    if key is None or callable(key) or (isinstance(key, str) and key):
        return
    raise ConfigurationError(
        f"{option} key={key!r} must be a non-empty string or a callable of the task's arguments"
    )


def _check_lease(lease_s: float) -> None:
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or not lease_s > 0:
        raise ConfigurationError(f"lease_s must be a number of seconds > 0, got {lease_s!r}")
