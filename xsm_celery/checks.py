"""Checks every part of the package applies to the options and settings it is given.

One home for them, so a count option says the same thing in the breaker, the kombu adapter
and the settings, and an unknown setting is answered with the same sentence (with the
closest known name when there is one) in the Celery and the Django integration.

The ranges of the resilience options live here too, each declared once as a ``Range`` (or
``Text``) constant and used by the in-process pattern, the Redis backend and the Celery
task option or setting alike, so ``lease_s=0.001`` is refused with the same sentence
wherever it is given. ``DECLARED`` lists every one of them with where it is set; the tests
and the table in docs/resilience.md are driven from it. The plain arguments of the patterns
(a timeout, a TTL, a backoff, a limiter's cost) are held to ``Range`` constants here as
well, so no module keeps number checks of its own.
"""

from __future__ import annotations

import difflib
import math
import numbers
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from xsm_celery.errors import ConfigurationError

__all__ = [
    "AIMD_DECREASE",
    "AIMD_INCREASE",
    "AIMD_INTERVAL_S",
    "AIMD_LATENCY_TARGET_MS",
    "AIMD_TARGET_LATENCY_S",
    "BACKOFF_CAP_MS",
    "BACKOFF_FACTOR",
    "BACKOFF_MS",
    "BREAKER_CHECK_INTERVAL_MS",
    "BREAKER_COOLDOWN_MS",
    "BREAKER_COUNT",
    "BREAKER_FAILURE_RATE",
    "BREAKER_PROBE_TIMEOUT_MS",
    "BULKHEAD_MAX_WAIT_S",
    "BULKHEAD_QUEUE_SIZE",
    "BURST",
    "CONCURRENCY_LIMIT",
    "COST",
    "DECLARED",
    "EPOCH_SECONDS",
    "FLEET_LEASE_S",
    "FLEET_PREFIX",
    "MAX_DEFERRAL_S",
    "MAX_WAIT_MS",
    "MEMORY_LEASE_S",
    "NON_EMPTY_TEXT",
    "PAUSE_SECONDS",
    "POSITIVE_SECONDS",
    "RATE_PERIOD_S",
    "RATE_PER_S",
    "SLIDING_LIMIT",
    "SPEC_BURST",
    "WAIT_SECONDS",
    "Declared",
    "Range",
    "Text",
    "check_rate",
    "key_names",
    "non_negative_int",
    "positive_int",
    "unknown_name_message",
]


def positive_int(name: str, value: object, *, advice: str = "") -> int:
    """Return ``value`` if it is an ``int`` of at least 1 (a ``bool`` is not a count).

    A whole ``float`` such as ``2.0`` is refused too: a count that arrives as a float was
    computed, and the computation is the bug to fix.

    Raises:
        ValueError: naming the option and the value it got.
    """
    return _int_at_least(name, value, 1, "a positive integer", advice)


def non_negative_int(name: str, value: object, *, advice: str = "") -> int:
    """Return ``value`` if it is an ``int`` of at least 0: a row limit, where 0 means none.

    Raises:
        ValueError: naming the option and the value it got.
    """
    return _int_at_least(name, value, 0, "an integer >= 0", advice)


def _int_at_least(name: str, value: object, low: int, what: str, advice: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        tail = f"; {advice}" if advice else ""
        raise ConfigurationError(f"{name} must be {what}, got {value!r}{tail}")
    return value


def unknown_name_message(what: str, name: str, known: Iterable[str]) -> str:
    """The sentence that refuses an unknown setting: the closest valid name, then all of them.

    ``what`` says where the name was found (``"Celery setting"``, ``"XSM_CELERY key"``).
    """
    names = sorted(known)
    close = difflib.get_close_matches(name.lower(), names, n=1) or difflib.get_close_matches(
        name, names, n=1
    )
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"unknown {what} {name!r}{hint} Valid names: {', '.join(names)}"


def key_names(name: str, value: object) -> tuple[str, ...]:
    """Return ``value`` as a tuple of key names if it is a list, tuple or set of strings.

    A lone string is refused too: ``"iban"`` would otherwise become ``("i", "b", "a", "n")``.

    Raises:
        ValueError: naming the setting, the value it got and an example.
    """
    if isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(item, str) and item for item in value
    ):
        return tuple(value)
    raise ConfigurationError(
        f"{name}={value!r} must be a list of key names, for example ['card_number', 'iban']"
    )


def _shown_number(value: float) -> str:
    """A bound as people write it: ``3600``, ``86400000``, ``1.157e-05``."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return f"{value:.4g}"


def _real(value: object) -> float | None:
    """``value`` as a float if it is a real number and not a ``bool``, else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float is past any end
        return -math.inf if str(value).startswith("-") else math.inf


def _sentence(name: str, shown: str, verb: str, what: str, *, why: str, advice: str) -> str:
    reason = f" ({why})" if why else ""
    tail = f"; {advice}" if advice else ""
    return f"{name}={shown} {verb} {what}{reason}{tail}"


@dataclass(frozen=True, slots=True)
class Range:
    """The finite numbers an option accepts, and why its ends are where they are.

    ``check`` refuses a ``bool``, anything that is not a real number, NaN and the
    infinities, a fraction where ``integer`` is set (``5.0`` is a whole number, ``5.5`` is
    not) and anything past an end, with one sentence that names the option, the value and
    the range. ``low_open`` / ``high_open`` leave that end out; ``infinite`` lets an
    infinite end be given itself (``max_ms=math.inf``: no cap).

    ``check`` words the refusal of a declared option ("``lease_s=0.001`` is out of
    range: ..."); ``require`` words a precondition of a plain argument ("``timeout_s``
    must be ..., got -1"). Both hold the value to the same ends.
    """

    low: float
    high: float
    unit: str = ""
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    why: str = ""
    #: Replaces the generated description (a rate reads better in its own words).
    label: str = ""
    #: Accept an infinite end itself (``inf`` meaning "no limit"); NaN is never accepted.
    infinite: bool = False

    def describe(self) -> str:
        """The range in words, as the error message and docs/resilience.md give it."""
        if self.label:
            return self.label
        kind = ("whole number" if self.integer else "number") + (
            f" of {self.unit}" if self.unit else ""
        )
        low, high = _shown_number(self.low), _shown_number(self.high)
        if math.isinf(self.high):
            floor = f"greater than {low}" if self.low_open else f"of at least {low}"
            if self.infinite:
                return f"a {kind} {floor} (inf for no limit)"
            return f"a finite {kind} {floor}"
        if self.low_open and self.high_open:
            return f"a {kind} strictly between {low} and {high}"
        if self.low_open:
            return f"a {kind} greater than {low} and at most {high}"
        if self.high_open:
            return f"a {kind} of at least {low} and less than {high}"
        return f"a {kind} from {low} to {high}"

    def holds(self, number: float) -> bool:
        """True if ``number`` is inside both ends and whole where it must be (NaN never is)."""
        if not math.isfinite(number):
            return self.infinite and number in (self.low, self.high)
        if self.integer and not number.is_integer():
            return False
        above = number > self.low if self.low_open else number >= self.low
        below = number < self.high if self.high_open else number <= self.high
        return above and below

    def number(self, name: str, value: object, *, shown: str = "", advice: str = "") -> float:
        """``value`` as a float if it is a real number (no range check); else refused."""
        number = _real(value)
        if number is None:
            tail = ", not a bool" if isinstance(value, bool) else ""
            what = self.describe() + tail
            message = _sentence(
                name, shown or repr(value), "must be", what, why=self.why, advice=advice
            )
            raise ConfigurationError(message)
        return number

    def check(self, name: str, value: object, *, shown: str = "", advice: str = "") -> float:
        """Return ``value`` as a float if it is in range, else raise naming the range.

        ``name`` is the option as the caller wrote it (``lease_s``, ``xsm_fleet_max_wait_ms``);
        ``shown`` replaces ``repr(value)`` in the message (a rate shows its string).

        Raises:
            ConfigurationError: ``"lease_s=0.001 is out of range: a number of seconds from
                2 to 3600 (...)"``.
        """
        number = self.number(name, value, shown=shown, advice=advice)
        if not self.holds(number):
            message = _sentence(
                name,
                shown or repr(value),
                "is out of range:",
                self.describe(),
                why=self.why,
                advice=advice,
            )
            raise ConfigurationError(message)
        return number

    def require(self, name: str, value: object, *, advice: str = "") -> float:
        """Return ``value`` as a float if it is in range; else raise as a precondition.

        Raises:
            ConfigurationError: ``"timeout_s must be a finite number of seconds greater
                than 0, got -1"``.
        """
        number = _real(value)
        if number is None or not self.holds(number):
            reason = f" ({self.why})" if self.why else ""
            tail = f"; {advice}" if advice else ""
            message = f"{name} must be {self.describe()}{reason}, got {value!r}{tail}"
            raise ConfigurationError(message)
        return number

    def check_int(self, name: str, value: object, *, shown: str = "", advice: str = "") -> int:
        """``check`` for a range of whole numbers, returning an ``int`` (``5.0`` gives 5)."""
        return int(self.check(name, value, shown=shown, advice=advice))


def _plain(text: str) -> bool:
    """No whitespace and no control, format or unassigned characters (category ``C``)."""
    return not any(c.isspace() or unicodedata.category(c).startswith("C") for c in text)


@dataclass(frozen=True, slots=True)
class Text:
    """The strings an option accepts: non-empty, at most ``max_length``, ``plain`` or not."""

    max_length: int | None = None
    #: Refuse whitespace and control characters (a key prefix must survive a shell and logs).
    plain: bool = False
    why: str = ""

    def describe(self) -> str:
        """The accepted strings in words."""
        length = f" of at most {self.max_length} characters" if self.max_length else ""
        plain = " without whitespace or control characters" if self.plain else ""
        return f"a non-empty string{length}{plain}"

    def check(self, name: str, value: object, *, advice: str = "") -> str:
        """Return ``value`` if it is such a string; ``5`` is not turned into ``"5"``.

        Raises:
            ConfigurationError: naming the option, the value and what it must be.
        """
        ok = (
            isinstance(value, str)
            and bool(value)
            and (self.max_length is None or len(value) <= self.max_length)
            and (not self.plain or _plain(value))
        )
        if not ok:
            what = self.describe()
            message = _sentence(name, repr(value), "must be", what, why=self.why, advice=advice)
            raise ConfigurationError(message)
        assert isinstance(value, str)
        return value


_DAY_S = 86_400.0

#: A sustained rate, in calls per second (the count of a rate over its period).
RATE_PER_S = Range(
    1 / _DAY_S,
    1_000_000.0,
    "calls per second",
    label="a rate from 1 per day (1.157e-05 per second) to 1000000 per second",
    why="slower than one call a day is no limit a dependency has; faster than a million a "
    "second is more than one Redis, or one process, can admit",
)
#: The period a rate is counted over (``per``, the ``10s`` of ``"5/10s"``, ``window_s``).
RATE_PERIOD_S = Range(
    0.001,
    _DAY_S,
    "seconds",
    why="the Redis scripts count in milliseconds; a day is the longest period a rate has",
)
#: A fleet bucket's size: the calls admitted at once after a quiet spell.
BURST = Range(
    1,
    1_000_000,
    "calls",
    integer=True,
    why="a burst is how many calls the dependency takes in one instant",
)
#: An in-process ``RateSpec``'s bucket size; costs may be fractions, so it may be one too.
SPEC_BURST = Range(
    0,
    1_000_000,
    "calls",
    low_open=True,
    why="the most admitted in one instant; costs may be fractions of a call in process",
)
#: The calls a sliding window admits per window; the Redis window counts whole calls.
SLIDING_LIMIT = Range(
    1,
    1_000_000,
    "calls per window",
    integer=True,
    why="a sliding window keeps one entry per admitted call and counts whole calls",
)
#: Runs at once under one concurrency limit (fixed, or an AIMD pool's bounds).
CONCURRENCY_LIMIT = Range(
    1,
    100_000,
    integer=True,
    why="each slot is a lease in one Redis sorted set, or a thread in process",
)
#: The lease of a slot kept in Redis (``Concurrency``, ``AIMD``, ``RedisSlots``, backend).
FLEET_LEASE_S = Range(
    2,
    3_600,
    "seconds",
    why="the lease is renewed every lease_s/3 while the task runs, each renewal a round trip "
    "that may take the 0.5 s socket timeout; a dead holder's slot frees within it",
)
#: The lease of a slot kept in this process's memory (``MemoryConcurrencyBackend``).
MEMORY_LEASE_S = Range(
    0.001,
    3_600,
    "seconds",
    why="the holder renews it in this process, on the same clock, with no round trip; "
    "the engine clock counts milliseconds",
)
#: How many slots an AIMD pool adds after a fast interval.
AIMD_INCREASE = Range(
    1,
    1_000,
    "slots",
    integer=True,
    why="additive increase: a step larger than a thousand slots is no longer gradual",
)
#: What an AIMD pool multiplies its limit by after a bad interval.
AIMD_DECREASE = Range(
    0,
    1,
    low_open=True,
    high_open=True,
    why="multiplicative decrease must shrink the limit and keep it above zero",
)
#: The fleet ``AIMD`` latency target (milliseconds, as the Redis script counts).
AIMD_LATENCY_TARGET_MS = Range(
    1,
    3_600_000,
    "milliseconds",
    why="a run slower than this counts like an error; the script counts whole milliseconds",
)
#: The in-process ``AIMDConfig`` latency target: the same range, in seconds.
AIMD_TARGET_LATENCY_S = Range(
    0.001,
    3_600,
    "seconds",
    why="a call slower than this counts like an error; the engine clock counts milliseconds",
)
#: How often an AIMD limit may move at most.
AIMD_INTERVAL_S = Range(
    0.01,
    3_600,
    "seconds",
    why="the limit moves at most once per interval; shorter than 10 ms it would move on "
    "almost every release, longer than an hour it would hardly adapt",
)
#: Calls that may wait in line for a ``Bulkhead`` slot.
BULKHEAD_QUEUE_SIZE = Range(
    0,
    1_000_000,
    "calls",
    integer=True,
    why="each queued call is a blocked thread or task",
)
#: How long a queued ``Bulkhead`` call waits (None waits as long as it takes).
BULKHEAD_MAX_WAIT_S = Range(
    0,
    _DAY_S,
    "seconds",
    why="a call queued for longer than a day is stuck, not waiting",
)
#: ``xsm_fleet_max_wait_ms``: the longest a worker waits in place for a token or a slot.
MAX_WAIT_MS = Range(
    0,
    30_000,
    "milliseconds",
    why="the worker slot is held while it waits; a longer wait is a deferral",
)
#: ``xsm_fleet_max_deferral_s``: the oldest a task's first deferral may be.
MAX_DEFERRAL_S = Range(
    1,
    30 * _DAY_S,
    "seconds",
    why="past it the task is dead-lettered; its deferral record stays in Redis that long",
)
#: ``xsm_fleet_prefix`` and ``FleetRedis(prefix=...)``.
FLEET_PREFIX = Text(
    max_length=64,
    plain=True,
    why="every fleet key in Redis starts with it, and the CLI and the admin show it",
)
#: Any non-empty string (a URL, an owner name).
NON_EMPTY_TEXT = Text()
#: A breaker's counts: ``failure_threshold``, ``half_open_max_calls``,
#: ``success_threshold``, ``window_size``.
BREAKER_COUNT = Range(
    1,
    10_000,
    integer=True,
    why="the failure-rate window is kept in the breaker's state, which a fleet breaker "
    "writes to Redis on every change",
)
#: ``failure_rate_threshold``: the failure rate that opens a breaker.
BREAKER_FAILURE_RATE = Range(
    0,
    1,
    low_open=True,
    why="a fraction of the window's outcomes; None turns the rate check off",
)
#: ``cooldown_ms``: time open before probes are admitted, in process and fleet alike.
BREAKER_COOLDOWN_MS = Range(
    0,
    86_400_000,
    "milliseconds",
    why="NaN or inf would leave the circuit open for ever; a day is the longest cooldown",
)
#: A fleet breaker's ``check_interval_ms``: how stale a process's cached state may get.
BREAKER_CHECK_INTERVAL_MS = Range(
    0,
    60_000,
    "milliseconds",
    why="after a trip elsewhere a process may admit calls for this long; 0 asks Redis on "
    "every call",
)
#: A fleet breaker's ``probe_timeout_ms``: a probe silent this long counts as failed.
BREAKER_PROBE_TIMEOUT_MS = Range(
    1_000,
    3_600_000,
    "milliseconds",
    why="shorter than a second would fail probes still running; longer than an hour "
    "leaves a lost probe's circuit half-open that long",
)


#: A timeout, a TTL or a deadline's budget: some time, neither none nor for ever.
POSITIVE_SECONDS = Range(0, math.inf, "seconds", low_open=True)
#: How long a caller waits for room: 0 does not wait, inf waits as long as it takes.
WAIT_SECONDS = Range(0, math.inf, "seconds", infinite=True)
#: A pause between two attempts; 0 tries again at once.
PAUSE_SECONDS = Range(0, math.inf, "seconds")
#: A retry's first backoff delay.
BACKOFF_MS = Range(0, math.inf, "milliseconds")
#: The cap on any one backoff delay; inf leaves the delays uncapped.
BACKOFF_CAP_MS = Range(0, math.inf, "milliseconds", infinite=True)
#: How much each backoff delay grows over the one before.
BACKOFF_FACTOR = Range(1, math.inf, why="so delays never shrink")
#: What one call costs a limiter: any amount above nothing, fractions included.
COST = Range(0, math.inf, low_open=True)
#: A wall-clock cutoff (``time.time() - retention``); only NaN is refused.
EPOCH_SECONDS = Range(
    -math.inf,
    math.inf,
    infinite=True,
    label="a number of epoch seconds such as time.time() - retention",
    why="NaN compares false with every row's time, so a purge would match every row",
)


def check_rate(
    count: object,
    per_s: object = 1.0,
    *,
    name: str = "rate",
    per_name: str = "per_s",
    shown: object = None,
) -> tuple[float, float]:
    """Check a rate of ``count`` calls per ``per_s`` seconds; return both as floats.

    The period is checked against ``RATE_PERIOD_S`` and the sustained rate
    (``count / per_s``) against ``RATE_PER_S``. ``shown`` is what the caller wrote (a rate
    string), shown instead of ``count``.

    Raises:
        ConfigurationError: naming the rate, its value per second and the range.
    """
    per = RATE_PERIOD_S.check(per_name, per_s)
    label = repr(count if shown is None else shown)
    number = RATE_PER_S.number(name, count, shown=label)
    if per != 1.0 or shown is not None:
        label += f" ({_shown_number(number / per)} per second)"
    RATE_PER_S.check(name, number / per, shown=label)
    return number, per


@dataclass(frozen=True, slots=True)
class Declared:
    """One checked option or setting: where it is set and the range it must be in."""

    where: str
    check: Range | Text


#: Every option range above, by the name the option or setting is given under, with where
#: it is set. The table in docs/resilience.md and tests/test_option_ranges.py are built
#: from it. The argument ranges (``POSITIVE_SECONDS`` to ``EPOCH_SECONDS``) are left out:
#: they are shapes many arguments share, not fleet options an operator tunes.
DECLARED: Mapping[str, Declared] = {
    "rate": Declared(
        "`fleet_rate_limit`, `RateLimit(rate)`, `RateLimiter`, `SlidingWindowLimiter`, "
        "`RateSpec`, `RedisTokenBucket`, `RedisSlidingWindow`",
        RATE_PER_S,
    ),
    "per_s": Declared(
        "the period of a rate (`'5/10s'`), `RateLimiter(per=)`, `RateSpec(per_s=)`, "
        "`RedisTokenBucket(per=)`, `RedisSlidingWindow(window_s=)`",
        RATE_PERIOD_S,
    ),
    "burst": Declared("`RateLimit(burst=)`, `RedisTokenBucket(burst=)`", BURST),
    "RateSpec.burst": Declared("`RateLimiter(burst=)`, `RateSpec(burst=)`", SPEC_BURST),
    "sliding limit": Declared(
        "the count of `RateLimit(rate, sliding=True)`, `RedisSlidingWindow(limit)`",
        SLIDING_LIMIT,
    ),
    "limit": Declared(
        "`fleet_concurrency`, `Concurrency(limit)`, `AIMD` and `AIMDConfig` limits, "
        "`RedisSlots`, the concurrency backends, `BulkheadConfig(max_concurrent=)`",
        CONCURRENCY_LIMIT,
    ),
    "lease_s": Declared(
        "`Concurrency(lease_s=)`, `AIMD(lease_s=)`, `RedisSlots`, `RedisConcurrencyBackend`",
        FLEET_LEASE_S,
    ),
    "MemoryConcurrencyBackend lease_s": Declared("`MemoryConcurrencyBackend`", MEMORY_LEASE_S),
    "increase": Declared("`AIMD(increase=)`, `AIMDConfig(increase=)`", AIMD_INCREASE),
    "decrease": Declared("`AIMD(decrease=)`, `AIMDConfig(decrease_factor=)`", AIMD_DECREASE),
    "latency_target_ms": Declared("`AIMD(latency_target_ms=)`", AIMD_LATENCY_TARGET_MS),
    "target_latency_s": Declared("`AIMDConfig(target_latency_s=)`", AIMD_TARGET_LATENCY_S),
    "interval_s": Declared("`AIMD(interval_s=)`, `AIMDConfig(interval_s=)`", AIMD_INTERVAL_S),
    "queue_size": Declared(
        "`BulkheadConfig(queue_size=)`, `AIMDConfig(queue_size=)`", BULKHEAD_QUEUE_SIZE
    ),
    "max_wait_s": Declared(
        "`BulkheadConfig(max_wait_s=)`, `AIMDConfig(max_wait_s=)` (or None)",
        BULKHEAD_MAX_WAIT_S,
    ),
    "xsm_fleet_max_wait_ms": Declared("Celery setting", MAX_WAIT_MS),
    "xsm_fleet_max_deferral_s": Declared("Celery setting", MAX_DEFERRAL_S),
    "xsm_fleet_prefix": Declared(
        "Celery setting, `FleetRedis(prefix=)`, the Redis backends' `prefix=`", FLEET_PREFIX
    ),
    "breaker counts": Declared(
        "`failure_threshold`, `half_open_max_calls`, `success_threshold`, `window_size` of "
        "`xsm_breakers`, `CircuitBreaker`, `BreakerSettings`, `FleetBreaker`",
        BREAKER_COUNT,
    ),
    "failure_rate_threshold": Declared(
        "`xsm_breakers`, `CircuitBreaker`, `BreakerSettings`, `FleetBreaker` (or None)",
        BREAKER_FAILURE_RATE,
    ),
    "cooldown_ms": Declared(
        "`xsm_breakers`, `CircuitBreaker`, `BreakerSettings`, `FleetBreaker`, "
        "`circuit_breaker_logic`",
        BREAKER_COOLDOWN_MS,
    ),
    "check_interval_ms": Declared("`xsm_breakers`, `FleetBreaker`", BREAKER_CHECK_INTERVAL_MS),
    "probe_timeout_ms": Declared("`xsm_breakers`, `FleetBreaker`", BREAKER_PROBE_TIMEOUT_MS),
}
