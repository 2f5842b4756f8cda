"""The fleet task options as values: ``RateLimit``, ``Concurrency`` and ``AIMD``.

Each checks itself when it is built, so a bad option fails where the task is defined, with
a message that says how to write it and the range it must be in (the ranges are declared
once, in ``xsm_celery.checks``). ``fleet`` reads them off the task class.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from xsm_celery.checks import (
    BURST,
    CONCURRENCY_LIMIT,
    FLEET_LEASE_S,
    RATE_PER_S,
    SLIDING_LIMIT,
    check_rate,
)
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.limits.aimd import AimdParams

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
        ConfigurationError: The rate cannot be read, or is outside ``checks.RATE_PER_S`` (at
            least one a day, at most a million a second) or its period outside
            ``checks.RATE_PERIOD_S``.
    """
    count, per = _read_rate(rate)
    if isinstance(rate, str):
        return check_rate(count, per, per_name=f"rate {rate!r}: period", shown=rate)
    return check_rate(count, per)


def _read_rate(rate: object) -> tuple[float, float]:
    """The count and period written in ``rate``, not yet checked against their ranges."""
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        return rate, 1.0
    if isinstance(rate, str) and (match := _RATE.match(rate)):
        count, per, unit = match.groups()
        return float(count), (float(per) if per else 1.0) * _UNIT_S[unit or "s"]
    raise ConfigurationError(
        f"fleet rate {rate!r} is not a rate; write it as '20/s', '100/m', '5/10s', '3/h' or a "
        f"number of calls per second, {RATE_PER_S.describe()}"
    )


@dataclass(frozen=True)
class RateLimit:
    """A fleet-wide rate: a token bucket with ``burst``, or a sliding window on request.

    Args:
        rate: ``"20/s"``, ``"100/m"``, ``"5/10s"``, ``"3/h"`` or calls per second.
        burst: Calls admitted at once after a quiet spell (bucket only; default: the
            rate's count, one period's worth: 20 for ``"20/s"``, 100 for ``"100/m"``; at
            least 1, at most ``checks.BURST``'s ceiling).
        key: A name shared by several tasks, or a callable of the task's arguments giving
            the part of the name that varies (a per-customer limit). Default: the task name.
        sliding: Use a sliding window (exact over any ``per`` stretch, no burst).
        on_redis_down: ``"open"`` runs the task with a warning, ``"closed"`` defers it.
        display: Show a callable key's value in the limit's name (Redis keys, logs,
            metrics, CLI, admin) instead of its digest; only for values known to be safe
            to show (a value shaped like a secret is still shown as its digest).
    """

    rate: str | float
    burst: int | None = None
    key: Key = None
    sliding: bool = False
    on_redis_down: RedisDown = "open"
    display: bool = False
    count: float = field(init=False, repr=False)
    per_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sliding:  # a window counts whole calls: its own range, checked first
            shown = f"{self.rate!r} with sliding=True"
            SLIDING_LIMIT.check_int("rate", _read_rate(self.rate)[0], shown=shown)
        count, per = parse_rate(self.rate)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "per_s", per)
        if self.sliding and self.burst is not None:
            raise ConfigurationError("RateLimit(sliding=True) has no burst; remove burst=")
        if self.burst is not None:
            object.__setattr__(self, "burst", BURST.check_int("burst", self.burst))
        _check_key(self.key, "RateLimit")
        _check_display(self.display, "RateLimit")
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
        display: As for ``RateLimit``.
    """

    limit: int
    key: Key = None
    lease_s: float = 30.0
    on_redis_down: RedisDown = "closed"
    display: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "limit", CONCURRENCY_LIMIT.check_int("fleet_concurrency", self.limit)
        )
        FLEET_LEASE_S.check("lease_s", self.lease_s)
        _check_key(self.key, "Concurrency")
        _check_display(self.display, "Concurrency")
        check_down(self.on_redis_down, "Concurrency")


@dataclass(frozen=True)
class AIMD(AimdParams):
    """A fleet-wide concurrency limit that adapts: additive increase, multiplicative decrease.

    Each finished run reports its time and outcome; at most once per ``interval_s`` the
    shared limit grows by ``increase`` after a success faster than ``latency_target_ms``,
    or is multiplied by ``decrease`` after an error or a slow run, within
    [``min_limit``, ``max_limit``]. Those seven numbers, and their checks, are inherited
    from ``AimdParams``, the record every AIMD pool shares; the fields added here say where
    the pool lives and what it does while Redis is down.
    """

    key: Key = None
    lease_s: float = 30.0
    on_redis_down: RedisDown = "closed"
    display: bool = False

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ValueError as exc:
            raise ConfigurationError(f"fleet_concurrency=AIMD(...): {exc}") from None
        FLEET_LEASE_S.check("lease_s", self.lease_s)
        _check_key(self.key, "AIMD")
        _check_display(self.display, "AIMD")
        check_down(self.on_redis_down, "AIMD")

    def params(self) -> AimdParams:
        """The pool's parameters: this option is the record itself."""
        return self


def _check_key(key: Key, option: str) -> None:
    if key is None or callable(key) or (isinstance(key, str) and key):
        return
    raise ConfigurationError(
        f"{option} key={key!r} must be a non-empty string or a callable of the task's arguments"
    )


def _check_display(display: object, option: str) -> None:
    if not isinstance(display, bool):
        raise ConfigurationError(
            f"{option} display={display!r} must be True (show a key's value in the limit's "
            "name) or False (show its digest, the default)"
        )
