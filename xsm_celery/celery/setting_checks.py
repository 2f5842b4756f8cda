"""The type and range of every ``xsm_*`` setting, checked when the settings are read.

A setting that cannot work must stop the worker at start, with the fix in the message, not
misbehave at the first retry or give-up: ``xsm_timer_batch=0.5`` truncated to 0 left every
long retry in the timer table, ``xsm_marker_ttl_s=1e30`` made Redis refuse every marker, a
store URL with an unknown scheme failed only when the first task gave up. Store values are
parsed here too, without opening anything: the schemes a kind of store accepts and the
methods a store object must have come from ``xsm_celery.persistence.opening``, the seam
that opens them later.
A number may come as a string (environment-driven configs), so it is parsed here and then
checked by ``xsm_celery.checks.Range``, the one home of every range check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from xsm_celery.checks import NON_EMPTY_TEXT, Range, Text, key_names
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.opening import StoreKind, methods_for, scheme_of, schemes_for

__all__ = [
    "DEFAULT_VISIBILITY_TIMEOUT_S",
    "bounded",
    "FIELD_CHECKS",
    "MAX_MARKER_TTL_S",
    "MAX_TIMER_BATCH",
    "check_countdown_against_broker",
    "check_markers_mode",
    "count",
    "names",
    "seconds",
    "store",
    "text",
]

#: Longest attempt-marker lifetime: ten years, far inside what Redis accepts for an expiry.
MAX_MARKER_TTL_S = 10 * 365 * 86_400.0
#: Most due timers one Beat tick may publish; a tick must finish well inside its interval.
MAX_TIMER_BATCH = 100_000
#: The visibility timeout kombu's Redis and SQS transports use when none is configured.
DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0

_ADVICE = "fix it or remove it"


def _refuse(key: str, value: object, must: str) -> ConfigurationError:
    return ConfigurationError(f"setting {key}={value!r} {must}; {_ADVICE}")


def _number(key: str, value: object) -> float:
    if isinstance(value, bool):
        raise _refuse(key, value, "must be a number, not a bool")
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int too large for a float: past any range's end
        return math.inf
    except (TypeError, ValueError):
        raise _refuse(key, value, "must be a number") from None


def seconds(key: str, value: object, *, high: float = math.inf) -> float:
    """A finite number of seconds in ``(0, high]``; numeric strings are parsed."""
    number = _number(key, value)
    allowed = Range(0, high, "seconds", low_open=True)
    return allowed.check(f"setting {key}", number, shown=repr(value), advice=_ADVICE)


def count(key: str, value: object, *, high: int) -> int:
    """A whole number in ``[1, high]``; ``50.0`` and ``"50"`` are 50, ``0.5`` is refused."""
    number = _number(key, value)
    allowed = Range(1, high, integer=True)
    return allowed.check_int(f"setting {key}", number, shown=repr(value), advice=_ADVICE)


def names(key: str, value: object) -> tuple[str, ...]:
    """A list of key names."""
    try:
        return key_names(f"setting {key}", value)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def text(key: str, value: object) -> str:
    """A non-empty string."""
    return NON_EMPTY_TEXT.check(f"setting {key}", value, advice=_ADVICE)


def bounded(allowed: Range | Text, default: object) -> Callable[[str, Any], Any]:
    """The ``(key, value)`` check of a setting whose range ``xsm_celery.checks`` declares."""
    advice = f"remove it to use the default ({default!r})"
    return lambda key, value: allowed.check(key, value, advice=advice)


def _scheme(url: str) -> str:
    if url == "django":
        return "django"
    return urlsplit(url).scheme.split("+", 1)[0].lower()


def store(key: str, value: object, kind: StoreKind) -> Any:
    """A store URL whose scheme this kind of store knows, or an object with its methods."""
    if isinstance(value, str):
        schemes = schemes_for(kind)
        if scheme_of(value) not in schemes:
            raise _refuse(
                key,
                value,
                f"is not a store URL this setting accepts (schemes: "
                f"{', '.join(schemes)}; for example sqlite:///xsm_celery.db)",
            )
        return value
    missing = [m for m in methods_for(kind) if not callable(getattr(value, m, None))]
    if missing:
        raise _refuse(
            key, value, f"is neither a URL nor a store object (it has no {', '.join(missing)}())"
        )
    return value


def check_markers_mode(markers: object, conf: Mapping[str, Any]) -> None:
    """Refuse ``memory://`` markers outside eager mode (or an in-process ``memory://`` broker).

    A prefork worker's children each have their own memory, and a killed child takes its
    markers with it, so a task that kills its worker would never be counted and loop for ever.
    """
    if isinstance(markers, str) and _scheme(markers) == "memory" and not _eager(conf):
        raise ConfigurationError(
            f"setting xsm_attempt_markers={markers!r} keeps markers in one process, which a "
            "real worker loses when a child dies; give a redis:// or database URL, or remove "
            "the setting (memory:// works only with task_always_eager=True or a memory:// broker)"
        )


def _eager(conf: Mapping[str, Any]) -> bool:
    """Eager mode, or kombu's in-memory broker, which only this one process can consume."""
    broker = conf.get("broker_url")
    in_process = isinstance(broker, str) and _scheme(broker) == "memory"
    return bool(conf.get("task_always_eager")) or in_process


def check_countdown_against_broker(countdown_max_s: float, conf: Mapping[str, Any]) -> None:
    """Refuse a countdown the broker would redeliver before it runs (Redis and SQS).

    Those transports redeliver a message unacknowledged past the visibility timeout, and a
    message waiting for its countdown is unacknowledged, so a longer countdown runs twice.
    """
    broker = conf.get("broker_url") or ""
    if not isinstance(broker, str) or _scheme(broker) not in ("redis", "rediss", "sentinel", "sqs"):
        return
    options = conf.get("broker_transport_options") or {}
    raw = options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT_S)
    visibility = _number("broker_transport_options['visibility_timeout']", raw)
    if countdown_max_s >= visibility:
        raise ConfigurationError(
            f"setting xsm_timer_countdown_max_s={countdown_max_s:g} is not below the broker's "
            f"visibility timeout ({visibility:g} s), so a retry waiting that long would be "
            "redelivered and run twice; lower xsm_timer_countdown_max_s or raise "
            "broker_transport_options['visibility_timeout']"
        )


#: How each field of ``XsmSettings`` is checked: ``(setting key, value) -> parsed value``.
FIELD_CHECKS: Mapping[str, Callable[[str, Any], Any]] = {
    "dead_letter_store": lambda k, v: store(k, v, "dead_letters"),
    "timer_store": lambda k, v: store(k, v, "timers"),
    "timer_countdown_max_s": seconds,
    "timer_batch": lambda k, v: count(k, v, high=MAX_TIMER_BATCH),
    "attempt_markers": lambda k, v: store(k, v, "markers"),
    "marker_ttl_s": lambda k, v: seconds(k, v, high=MAX_MARKER_TTL_S),
    "redact_keys": names,
    "dead_letter_spool": text,
    "workflow_outage_max_s": lambda k, v: seconds(k, v, high=MAX_MARKER_TTL_S),
    "workflow_recovery_grace_s": lambda k, v: seconds(k, v, high=86_400.0),
}
