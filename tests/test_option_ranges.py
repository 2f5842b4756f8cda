"""Every fleet option and setting is checked where it is declared, against one range.

The ranges live in ``xsm_celery.checks.DECLARED``. This module drives each of them through
every place it can be given (the in-process pattern, the Redis class, the Celery task option
or setting): each end is accepted, just past each end is refused with the range in the
message, and NaN, the infinities, a bool and a string are refused. docs/resilience.md must
list the same table. Nothing here reaches Redis: the stores never connect.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from xsm_celery import checks
from xsm_celery.celery import Xsm
from xsm_celery.celery.fleet.plan import AIMD, Concurrency, RateLimit, fleet_settings
from xsm_celery.checks import DECLARED, Declared, Range, Text
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import (
    AIMDConfig,
    BulkheadConfig,
    CircuitBreaker,
    MemoryConcurrencyBackend,
    RateLimiter,
)
from xsm_celery.patterns.breaker.chart import circuit_breaker_logic
from xsm_celery.patterns.limits.protocols import BreakerSettings, RateSpec
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import AimdParams, RedisSlots
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.limit_backends import (
    RedisBreakerStateBackend,
    RedisConcurrencyBackend,
    RedisRateLimitBackend,
)
from xsm_celery.redis.rate_limit import RedisSlidingWindow, RedisTokenBucket

DOCS = Path(__file__).resolve().parent.parent / "docs" / "resilience.md"

Build = Callable[[Any], object]


class _Admitting(FleetRedis):
    """A fleet store whose every script admits, so a backend call runs past its checks."""

    def run(self, name: str, keys: Any, args: Any) -> Any:
        return [1, 0, 1, 1]


def _store() -> FleetRedis:
    """A store on a client that never connects."""
    return _Admitting(redis.Redis(), prefix="xsm-test-ranges:")


def _app(**conf: Any) -> Celery:
    """A fresh app on the memory broker whose fleet Redis is never contacted here."""
    app = Celery(f"ranges-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        xsm_redis_url="redis://127.0.0.1:6379/0",
        xsm_attempt_markers="memory://",
        xsm_dead_letter_store="memory://ranges",
        **conf,
    )
    return app


def _settings(key: str) -> Build:
    """Read the fleet settings of an app with ``key`` set."""
    return lambda value: fleet_settings(_app(**{key: value}))


def _breaker_task(option: str) -> Build:
    """Define and bind a task with ``breaker="b"``, ``xsm_breakers["b"][option]`` set."""

    def build(value: Any) -> object:
        app = _app(xsm_breakers={"b": {option: value}})
        name = f"ranges.t{uuid.uuid4().hex[:6]}"

        def noop() -> None:
            """Does nothing."""

        Xsm(app).task(name=name, shared=False, breaker="b")(noop)
        return app.tasks[name]  # binding checks the fleet options

    return build


def _circuit(**options: Any) -> object:
    CircuitBreaker(**options).close()
    return None


def _breaker_places(option: str) -> dict[str, Build]:
    """A breaker option: in process, in the Redis backend's settings, fleet, task option."""
    return {
        "CircuitBreaker": lambda v: _circuit(**{option: v}),
        "BreakerSettings": lambda v: BreakerSettings(**{option: v}),
        "FleetBreaker": lambda v: FleetBreaker(_store(), "b", **{option: v}),
        "xsm_breakers": _breaker_task(option),
    }


#: Every place each declared option or setting can be given, as ``value -> built thing``.
PLACES: dict[str, dict[str, Build]] = {
    "rate": {
        "RateLimit": RateLimit,
        "RateLimiter": lambda v: RateLimiter(rate=v),
        "RateSpec": lambda v: RateSpec(rate=v),
        "RedisTokenBucket": lambda v: RedisTokenBucket(_store(), "r", v),
    },
    "per_s": {
        "RateLimiter": lambda v: RateLimiter(rate=1, per=v),
        "RateSpec": lambda v: RateSpec(rate=1, per_s=v),
        "RedisTokenBucket": lambda v: RedisTokenBucket(_store(), "r", 1, per=v),
        "RedisSlidingWindow": lambda v: RedisSlidingWindow(_store(), "w", 1, window_s=v),
    },
    "burst": {
        "RateLimit": lambda v: RateLimit("20/s", burst=v),
        "RedisTokenBucket": lambda v: RedisTokenBucket(_store(), "r", 20, burst=v),
    },
    "RateSpec.burst": {
        "RateLimiter": lambda v: RateLimiter(rate=1, burst=v),
        "RateSpec": lambda v: RateSpec(rate=1, burst=v),
    },
    "sliding limit": {
        "RedisSlidingWindow": lambda v: RedisSlidingWindow(_store(), "w", v, 10.0),
    },
    "limit": {
        "Concurrency": Concurrency,
        "AIMD": lambda v: AIMD(initial=v, min_limit=v, max_limit=v),
        "AimdParams": lambda v: AimdParams(initial=v, min_limit=v, max_limit=v),
        "AIMDConfig": lambda v: AIMDConfig(min_limit=v, max_limit=v),
        "RedisSlots": lambda v: RedisSlots(_store(), "s", v),
        "RedisConcurrencyBackend": lambda v: RedisConcurrencyBackend(_store()).acquire(
            "k", "h", v, 30.0
        ),
        "MemoryConcurrencyBackend": lambda v: MemoryConcurrencyBackend().acquire("k", "h", v, 30.0),
        "BulkheadConfig": lambda v: BulkheadConfig(max_concurrent=v),
    },
    "lease_s": {
        "Concurrency": lambda v: Concurrency(1, lease_s=v),
        "AIMD": lambda v: AIMD(lease_s=v),
        "RedisSlots": lambda v: RedisSlots(_store(), "s", 1, lease_s=v),
        "RedisConcurrencyBackend.acquire": lambda v: RedisConcurrencyBackend(_store()).acquire(
            "k", "h", 1, v
        ),
        "RedisConcurrencyBackend.renew": lambda v: RedisConcurrencyBackend(_store()).renew(
            "k", "h", v
        ),
    },
    "MemoryConcurrencyBackend lease_s": {
        "acquire": lambda v: MemoryConcurrencyBackend().acquire("k", "h", 1, v),
        "renew": lambda v: MemoryConcurrencyBackend().renew("k", "h", v),
    },
    "increase": {
        "AIMD": lambda v: AIMD(increase=v),
        "AimdParams": lambda v: AimdParams(increase=v),
        "AIMDConfig": lambda v: AIMDConfig(increase=v),
    },
    "decrease": {
        "AIMD": lambda v: AIMD(decrease=v),
        "AimdParams": lambda v: AimdParams(decrease=v),
        "AIMDConfig": lambda v: AIMDConfig(decrease_factor=v),
    },
    "latency_target_ms": {
        "AIMD": lambda v: AIMD(latency_target_ms=v),
        "AimdParams": lambda v: AimdParams(latency_target_ms=v),
    },
    "target_latency_s": {"AIMDConfig": lambda v: AIMDConfig(target_latency_s=v)},
    "interval_s": {
        "AIMD": lambda v: AIMD(interval_s=v),
        "AimdParams": lambda v: AimdParams(interval_s=v),
        "AIMDConfig": lambda v: AIMDConfig(interval_s=v),
    },
    "queue_size": {
        "BulkheadConfig": lambda v: BulkheadConfig(queue_size=v),
        "AIMDConfig": lambda v: AIMDConfig(queue_size=v),
    },
    "max_wait_s": {
        "BulkheadConfig": lambda v: BulkheadConfig(max_wait_s=v),
        "AIMDConfig": lambda v: AIMDConfig(max_wait_s=v),
    },
    "xsm_fleet_max_wait_ms": {"fleet_settings": _settings("xsm_fleet_max_wait_ms")},
    "xsm_fleet_max_deferral_s": {"fleet_settings": _settings("xsm_fleet_max_deferral_s")},
    "xsm_fleet_prefix": {
        "fleet_settings": _settings("xsm_fleet_prefix"),
        "FleetRedis": lambda v: FleetRedis(redis.Redis(), prefix=v),
        "RedisRateLimitBackend": lambda v: RedisRateLimitBackend(redis.Redis(), prefix=v),
        "RedisBreakerStateBackend": lambda v: RedisBreakerStateBackend(redis.Redis(), prefix=v),
    },
    "breaker counts": {
        **{f"{k} failure_threshold": f for k, f in _breaker_places("failure_threshold").items()},
        **{f"{k} window_size": f for k, f in _breaker_places("window_size").items()},
        "CircuitBreaker half_open_max_calls": lambda v: _circuit(half_open_max_calls=v),
        "BreakerSettings success_threshold": lambda v: BreakerSettings(success_threshold=v),
    },
    "failure_rate_threshold": _breaker_places("failure_rate_threshold"),
    "cooldown_ms": {
        **_breaker_places("cooldown_ms"),
        "circuit_breaker_logic": circuit_breaker_logic,
    },
    "check_interval_ms": {
        "FleetBreaker": lambda v: FleetBreaker(_store(), "b", check_interval_ms=v),
        "xsm_breakers": _breaker_task("check_interval_ms"),
    },
    "probe_timeout_ms": {
        "FleetBreaker": lambda v: FleetBreaker(_store(), "b", probe_timeout_ms=v),
        "xsm_breakers": _breaker_task("probe_timeout_ms"),
    },
}


def _ends(check: Range) -> tuple[list[float], list[float]]:
    """Values at (or just inside an open) end, and values just past each end."""
    accepted: list[float] = []
    refused: list[float] = []
    for bound, outward, is_open in (
        (check.low, -1, check.low_open),
        (check.high, 1, check.high_open),
    ):
        step = 1 if check.integer else max(abs(bound), 1.0) * 1e-6
        if is_open:
            accepted.append(bound - outward * step)
            refused.append(bound)
        else:
            accepted.append(bound)
            refused.append(bound + outward * step)
    if check.integer:
        accepted.append(float(check.low))  # 5.0 is a whole number
        refused.append(check.low + 0.5)
    return accepted, refused


_SPECIAL: list[object] = [math.nan, math.inf, -math.inf, True, "5", 10**400]
#: Places that read a string as a value of their own (``RateLimit("5")`` is five a second).
_PARSES_STRINGS = {("rate", "RateLimit")}


def _shown(value: object) -> str:
    return repr(value)[:24]


def _text_values(check: Text) -> tuple[list[object], list[object]]:
    longest = "x" * (check.max_length or 64)
    accepted: list[object] = ["a", longest, "xsm:fleet:", "ünï-cödé:"]
    refused: list[object] = ["", longest + "x", "two words", "tab\tx", "nul\x00", 5, b"x", True]
    return accepted, refused


def _cases() -> Iterator[Any]:
    for name, declared in DECLARED.items():
        check = declared.check
        if isinstance(check, Range):
            accepted, refused = _ends(check)
            refused = [*refused, *_SPECIAL]
        else:
            accepted, refused = _text_values(check)
        for place, build in PLACES.get(name, {}).items():
            for value in accepted:
                yield pytest.param(
                    name, build, value, True, id=f"{name}-{place}-ok-{_shown(value)}"
                )
            for value in refused:
                if isinstance(value, str) and (name, place) in _PARSES_STRINGS:
                    continue
                yield pytest.param(
                    name, build, value, False, id=f"{name}-{place}-no-{_shown(value)}"
                )


def test_every_declared_range_has_its_places_and_nothing_else() -> None:
    """The table below covers every entry of ``DECLARED``, and only those."""
    assert set(PLACES) == set(DECLARED)
    assert all(PLACES[name] for name in PLACES)


@pytest.mark.parametrize(("name", "build", "value", "ok"), list(_cases()))
def test_each_end_is_accepted_and_just_past_it_refused_with_the_range(
    name: str, build: Build, value: object, ok: bool
) -> None:
    """At each end (or just inside an open one): built. Past it, or not a number: refused."""
    if ok:
        build(value)
        return
    with pytest.raises(ConfigurationError) as refused:
        build(value)
    assert DECLARED[name].check.describe() in str(refused.value)


@pytest.mark.parametrize(
    ("rate", "ok"),
    [
        ("1/24h", True),
        ("1/0.001s", True),
        ("1000000/s", True),
        ("1/25h", False),
        ("1/0.0009s", False),
        ("1000001/s", False),
        ("0/s", False),
    ],
)
def test_a_rate_string_is_held_to_the_same_ranges(rate: str, ok: bool) -> None:
    """The period of ``'5/10s'`` and the rate per second are checked as for numbers."""
    if ok:
        RateLimit(rate)
        return
    with pytest.raises(ConfigurationError) as refused:
        RateLimit(rate)
    message = str(refused.value)
    assert checks.RATE_PERIOD_S.describe() in message or checks.RATE_PER_S.describe() in message


@pytest.mark.parametrize(
    ("rate", "ok"), [("1000000/10s", True), ("1/s", True), ("1000001/10s", False), ("2.5/s", False)]
)
def test_a_sliding_window_counts_whole_calls(rate: str, ok: bool) -> None:
    """``RateLimit(sliding=True)`` holds its count to ``SLIDING_LIMIT``, before the rate."""
    if ok:
        RateLimit(rate, sliding=True)
        return
    with pytest.raises(ConfigurationError, match="with sliding=True is out of range") as refused:
        RateLimit(rate, sliding=True)
    assert checks.SLIDING_LIMIT.describe() in str(refused.value)


ISSUE_VALUES: list[tuple[str, Build, object]] = [
    ("rate", RateLimit, 1e-300),
    ("burst", lambda v: RateLimit("20/s", burst=v), math.nan),
    ("burst", lambda v: RateLimit("20/s", burst=v), 1e12),
    ("lease_s", lambda v: Concurrency(2, lease_s=v), 0.001),
    ("lease_s", lambda v: Concurrency(2, lease_s=v), 1e30),
    ("xsm_fleet_max_wait_ms", _settings("xsm_fleet_max_wait_ms"), 1e30),
    ("xsm_fleet_max_deferral_s", _settings("xsm_fleet_max_deferral_s"), 1e308),
    ("xsm_fleet_prefix", _settings("xsm_fleet_prefix"), ""),
    ("xsm_fleet_prefix", _settings("xsm_fleet_prefix"), 5),
    ("check_interval_ms", _breaker_task("check_interval_ms"), -1),
    ("probe_timeout_ms", _breaker_task("probe_timeout_ms"), 0),
    ("cooldown_ms", _breaker_task("cooldown_ms"), 1e30),
]


@pytest.mark.parametrize(("name", "build", "value"), ISSUE_VALUES)
def test_the_reported_values_are_refused_where_they_are_declared(
    name: str, build: Build, value: object
) -> None:
    """Each value the issue found accepted is now refused, naming it and its range."""
    with pytest.raises(ConfigurationError) as refused:
        build(value)
    message = str(refused.value)
    assert f"{name}={value!r}" in message
    assert DECLARED[name].check.describe() in message


def test_an_unset_setting_takes_its_default() -> None:
    """None (unset) is the default; only a value that is set is checked."""
    settings = fleet_settings(_app())
    assert (settings.prefix, settings.max_wait_ms, settings.max_deferral_s) == (
        "xsm:fleet:",
        250.0,
        3600.0,
    )
    assert fleet_settings(_app(xsm_fleet_prefix=None)).prefix == "xsm:fleet:"


def test_the_default_probe_timeout_stays_in_its_range() -> None:
    """A day-long cooldown does not push the default probe timeout past an hour."""
    assert FleetBreaker(_store(), "b", cooldown_ms=86_400_000).probe_timeout_ms == 3_600_000
    assert FleetBreaker(_store(), "b", cooldown_ms=10).probe_timeout_ms == 60_000


@pytest.fixture
def used_ranges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Range, str]]:
    """Every ``Range.check`` call made during the test, as (the range object, the name)."""
    seen: list[tuple[Range, str]] = []
    original = Range.check

    def spy(self: Range, name: str, value: object, **options: Any) -> float:
        seen.append((self, name))
        return original(self, name, value, **options)

    monkeypatch.setattr(Range, "check", spy)
    return seen


@pytest.mark.parametrize(
    ("shared", "value", "places"),
    [
        (
            checks.FLEET_LEASE_S,
            0.001,
            [
                lambda v: Concurrency(2, lease_s=v),
                lambda v: RedisSlots(_store(), "s", 2, lease_s=v),
                lambda v: RedisConcurrencyBackend(_store()).acquire("k", "h", 2, v),
            ],
        ),
        (
            checks.BREAKER_COOLDOWN_MS,
            1e30,
            [
                lambda v: _circuit(cooldown_ms=v),
                lambda v: FleetBreaker(_store(), "b", cooldown_ms=v),
                lambda v: BreakerSettings(cooldown_ms=v),
            ],
        ),
        (
            checks.RATE_PER_S,
            1e-300,
            [
                lambda v: RateLimiter(rate=v),
                lambda v: RedisTokenBucket(_store(), "r", v),
                RateLimit,
            ],
        ),
    ],
    ids=["lease_s", "cooldown_ms", "rate"],
)
def test_the_pattern_the_redis_class_and_the_option_use_one_check(
    used_ranges: list[tuple[Range, str]], shared: Range, value: float, places: list[Build]
) -> None:
    """The same ``Range`` object refuses the value everywhere, with the same sentence."""
    messages = []
    for build in places:
        used_ranges.clear()
        with pytest.raises(ConfigurationError) as refused:
            build(value)
        messages.append(str(refused.value))
        assert any(found is shared for found, _ in used_ranges)
    assert len(set(messages)) == 1, messages
    assert shared.describe() in messages[0]


def test_the_in_memory_lease_keeps_a_lower_floor() -> None:
    """No round trip renews an in-process lease, so 1 ms is allowed there (and only there)."""
    assert MemoryConcurrencyBackend().acquire("k", "h", 1, 0.001).allowed
    with pytest.raises(ConfigurationError, match="from 2 to 3600"):
        RedisConcurrencyBackend(_store()).acquire("k", "h", 1, 0.001)


def docs_row(name: str, declared: Declared) -> str:
    """The row of docs/resilience.md's table of ranges for one entry of ``DECLARED``."""
    label = name if " " in name else f"`{name}`"
    check = declared.check
    return f"| {label} | {declared.where} | {check.describe()} | {check.why} |"


def test_the_docs_list_every_range() -> None:
    """docs/resilience.md has one row per range, as ``DECLARED`` says it."""
    text = DOCS.read_text(encoding="utf-8")
    missing = [docs_row(n, d) for n, d in DECLARED.items() if docs_row(n, d) not in text]
    assert not missing, "\n".join(missing)
