"""The ``xsm_*`` settings of a Celery app, read once into a frozen record.

Every setting lives in ``app.conf`` under the ``xsm_`` prefix and has a default that works
with no configuration at all. The record is built the first time a chart task or a Beat helper
needs it and cached per app, so a task run never parses configuration. A key that starts with
``xsm_`` but is not a known setting is refused with the closest known name, because a typo in
a setting (``xsm_dead_leter_store``) would otherwise silently fall back to the default store.
"""

from __future__ import annotations

import difflib
import importlib
import math
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.errors import ConfigurationError

__all__ = [
    "DEFAULT_COUNTDOWN_MAX_S",
    "DEFAULT_STORE_URL",
    "XsmSettings",
    "read_settings",
    "register_keys",
]

#: Where dead letters, durable timers and attempt markers go when nothing is configured: a
#: SQLite file in the worker's working directory (created mode 0600). Production sets a
#: PostgreSQL URL, which every worker and Beat share.
DEFAULT_STORE_URL = "sqlite:///xsm_celery.db"

#: Longest retry delay sent as a Celery countdown. Redis redelivers a message that stays
#: unacknowledged past its visibility timeout (3600 s by default), and a countdown message
#: is unacknowledged until it runs, so longer delays become durable timer rows.
DEFAULT_COUNTDOWN_MAX_S = 300.0

#: How long an attempt marker is kept: it only has to outlive a redelivery of the message.
DEFAULT_MARKER_TTL_S = 86_400.0

#: How many due timers one Beat tick publishes at most.
DEFAULT_TIMER_BATCH = 500

_PREFIX = "xsm_"
#: Modules that call ``register_keys`` for the settings they read.
_REGISTRARS = ("xsm_celery.celery.relay", "xsm_celery.celery.consumer", "xsm_celery.celery.header")
_registered: set[str] = set()
_cache: weakref.WeakKeyDictionary[Any, XsmSettings] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class XsmSettings:
    """The ``xsm_*`` settings of one Celery app, validated.

    Store settings hold either an object (used as is) or a URL string, resolved lazily by
    the module that needs the store, so reading settings never opens a connection.
    """

    #: ``xsm_dead_letter_store``: a DeadLetterStore object or a URL (``sqlite:///...``,
    #: ``postgresql://...``, ``memory://``).
    dead_letter_store: Any = DEFAULT_STORE_URL
    #: ``xsm_timer_store``: a TimerStore object or a SQLAlchemy URL for durable retry timers.
    timer_store: Any = DEFAULT_STORE_URL
    #: ``xsm_timer_countdown_max_s``: delays above this many seconds become timer rows.
    timer_countdown_max_s: float = DEFAULT_COUNTDOWN_MAX_S
    #: ``xsm_timer_batch``: most due timers published by one Beat tick.
    timer_batch: int = DEFAULT_TIMER_BATCH
    #: ``xsm_attempt_markers``: where "attempt n started" markers go; a URL
    #: (``redis://``, ``sqlite:///``, ``postgresql://``), an object, or None to pick the
    #: broker's Redis, else the result backend's Redis, else the timer store's database.
    attempt_markers: Any = None
    #: ``xsm_marker_ttl_s``: lifetime of an attempt marker in seconds.
    marker_ttl_s: float = DEFAULT_MARKER_TTL_S
    #: ``xsm_redact_keys``: extra context/argument keys masked in dead letters.
    redact_keys: tuple[str, ...] = ()


_FIELDS = {f"{_PREFIX}{name}" for name in XsmSettings.__dataclass_fields__}


def register_keys(*keys: str) -> None:
    """Accept more ``xsm_`` keys, read by another part of the package (outbox relay, consumer).

    Without this, ``read_settings`` would refuse them as unknown.
    """
    for key in keys:
        if not key.startswith(_PREFIX):
            raise ConfigurationError(f"setting {key!r} must start with {_PREFIX!r}")
        _registered.add(key)


def read_settings(app: Any) -> XsmSettings:
    """Return the app's validated settings, read from ``app.conf`` on the first call only.

    Raises:
        ConfigurationError: an unknown ``xsm_`` key, or a value of the wrong type or range.
    """
    cached = _cache.get(app)
    if cached is not None:
        return cached
    with _lock:
        cached = _cache.get(app)
        if cached is None:
            cached = _build(_xsm_items(app.conf, getattr(app, "namespace", None)))
            _cache[app] = cached
    return cached


def _xsm_items(conf: Any, namespace: str | None = None) -> dict[str, Any]:
    """Every ``xsm_`` key of a Celery config, lower-cased (Django's ``CELERY_XSM_...`` style).

    With a namespace (``config_from_object("django.conf:settings", namespace="CELERY")``) the
    config also lists every other Django setting, so an upper-case key counts only with the
    namespace prefix: ``XSM_CELERY``, the Django app's own settings dict, is not Celery's.
    """
    prefix = f"{namespace.rstrip('_').upper()}_" if namespace else ""
    items: dict[str, Any] = {}
    for key in list(conf.keys()):
        name = str(key)
        if prefix and name.upper().startswith(prefix):
            name = name[len(prefix) :]
        elif prefix and name.isupper():
            continue
        if name.lower().startswith(_PREFIX):
            items[name.lower()] = conf[key]
    return items


def _build(items: Mapping[str, Any]) -> XsmSettings:
    _refuse_unknown(items)
    values: dict[str, Any] = {}
    for key, value in items.items():
        if key in _FIELDS and value is not None:
            values[key[len(_PREFIX) :]] = value
    if "timer_countdown_max_s" in values:
        values["timer_countdown_max_s"] = _positive("xsm_timer_countdown_max_s", values)
    if "marker_ttl_s" in values:
        values["marker_ttl_s"] = _positive("xsm_marker_ttl_s", values)
    if "timer_batch" in values:
        values["timer_batch"] = int(_positive("xsm_timer_batch", values))
    if "redact_keys" in values:
        values["redact_keys"] = _keys(values["redact_keys"])
    return XsmSettings(**values)


def _refuse_unknown(items: Iterable[str]) -> None:
    known = _FIELDS | _registered
    for key in items:
        if key in known:
            continue
        known = _FIELDS | _load_registrations()
        if key in known:
            continue
        close = difflib.get_close_matches(key.lower(), sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigurationError(
            f"unknown Celery setting {key!r}{hint} Known xsm_ settings: {', '.join(sorted(known))}"
        )


def _load_registrations() -> set[str]:
    """Import the sibling modules that register their own keys, in case nobody has yet.

    The outbox relay and the consumer read settings of their own; a project that sets them
    in ``app.conf`` before importing those modules must not be told the keys are unknown.
    """
    for module in _REGISTRARS:
        try:
            importlib.import_module(module)
        except ImportError:
            continue
    return set(_registered)


def _positive(key: str, values: Mapping[str, Any]) -> float:
    name = key[len(_PREFIX) :]
    raw = values[name]
    try:
        number = float(raw)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(raw, bool) or not (number > 0 and math.isfinite(number)):
        raise ConfigurationError(
            f"setting {key}={raw!r} must be a finite number greater than 0; "
            f"remove it to use the default ({getattr(XsmSettings(), name)!r})"
        )
    return number


def _keys(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str) or not all(isinstance(k, str) for k in raw):
        raise ConfigurationError(
            f"setting xsm_redact_keys={raw!r} must be a list of key names, "
            "for example ['card_number', 'iban']"
        )
    return tuple(raw)
