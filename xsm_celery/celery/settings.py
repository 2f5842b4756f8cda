"""The ``xsm_*`` settings of a Celery app, read once into a frozen record.

Every setting lives in ``app.conf`` under the ``xsm_`` prefix and has a default that works
with no configuration at all. The record is built the first time a chart task or a Beat helper
needs it and cached per app, so a task run never parses configuration. A key that starts with
``xsm_`` but is not a known setting is refused with the closest known name, because a typo in
a setting (``xsm_dead_leter_store``) would otherwise silently fall back to the default store.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.celery import setting_checks
from xsm_celery.celery.deadletter.spool import DEFAULT_SPOOL_DIR
from xsm_celery.celery.setting_checks import (
    FIELD_CHECKS,
    bounded,
    check_countdown_against_broker,
    check_markers_mode,
)
from xsm_celery.checks import FLEET_PREFIX, MAX_DEFERRAL_S, MAX_WAIT_MS, unknown_name_message
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.markers import DEFAULT_MARKER_TTL_S

__all__ = [
    "DECLARED_KEYS",
    "DEFAULT_COUNTDOWN_MAX_S",
    "DEFAULT_FLEET_MAX_DEFERRAL_S",
    "DEFAULT_FLEET_MAX_WAIT_MS",
    "DEFAULT_FLEET_PREFIX",
    "DEFAULT_STORE_URL",
    "DEFAULT_WORKFLOW_OUTAGE_MAX_S",
    "DEFAULT_WORKFLOW_RECOVERY_GRACE_S",
    "REDIS_URL_SCHEMES",
    "XsmSettings",
    "broker_redis_url",
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

#: How long a workflow step that meets an outage or a busy key is retried, uncounted, before
#: its message becomes a ``deferred_too_long`` dead letter: a day, long enough for any
#: database failover or maintenance window, short enough that a store left broken is seen.
DEFAULT_WORKFLOW_OUTAGE_MAX_S = 86_400.0

#: How overdue a workflow timer or task-step row must be before the Beat scan re-publishes
#: it: longer than a busy queue's usual delay, so the scan rarely duplicates a live message.
DEFAULT_WORKFLOW_RECOVERY_GRACE_S = 30.0

#: How many due timers one Beat tick publishes at most.
DEFAULT_TIMER_BATCH = 500

#: A fleet task deferred for longer than this (since its first deferral) is dead-lettered.
DEFAULT_FLEET_MAX_DEFERRAL_S = 3_600.0

#: Longest a worker slot is held waiting inline for a fleet token or slot before deferring.
DEFAULT_FLEET_MAX_WAIT_MS = 250.0

#: Every fleet key in Redis starts with this unless ``xsm_fleet_prefix`` says otherwise.
DEFAULT_FLEET_PREFIX = "xsm:fleet:"

_PREFIX = "xsm_"
#: A check of a value: ``(setting key, value) -> the value to use``; raises ConfigurationError.
Check = Callable[[str, Any], Any]

#: Every ``xsm_*`` setting that is not a field of ``XsmSettings``: read by one part of the
#: package (outbox relay, fleet options, exporters, signing, workflows), declared here with
#: its check (None: the part that reads it checks it). One table, so a key is known, and a bad
#: value refused at start, whichever modules a worker happens to have imported.
DECLARED_KEYS: Mapping[str, Check | None] = {
    # The outbox relay (``worker.relay``).
    "xsm_outbox_store": lambda k, v: setting_checks.store(k, v, "outbox"),
    "xsm_relay_broker_url": setting_checks.text,
    "xsm_relay_batch": lambda k, v: setting_checks.count(k, v, high=100_000),
    "xsm_relay_lease_s": setting_checks.seconds,
    "xsm_relay_max_batches": lambda k, v: setting_checks.count(k, v, high=100_000),
    "xsm_relay_max_attempts": lambda k, v: setting_checks.count(k, v, high=100_000),
    "xsm_relay_owner": setting_checks.text,
    "xsm_event_partitions": lambda k, v: setting_checks.count(k, v, high=4096),
    # Fleet limits and breakers (``fleet.plan``), their ranges in ``xsm_celery.checks``.
    "xsm_redis_url": None,
    "xsm_breakers": None,
    "xsm_fleet_prefix": bounded(FLEET_PREFIX, DEFAULT_FLEET_PREFIX),
    "xsm_fleet_max_deferral_s": bounded(MAX_DEFERRAL_S, DEFAULT_FLEET_MAX_DEFERRAL_S),
    "xsm_fleet_max_wait_ms": bounded(MAX_WAIT_MS, DEFAULT_FLEET_MAX_WAIT_MS),
    # Exporters (``xsm_celery.metrics.worker``).
    "xsm_metrics_port": None,
    "xsm_metrics_addr": None,
    "xsm_tracing": None,
    "xsm_send_events": None,
    "xsm_log_facts": None,
    # The key that signs the ``xsm_chart`` header (``task.header``).
    "xsm_signing_key": None,
    # The store of workflows that pass no ``store=`` (``workflow.context``).
    "xsm_workflow_store": None,
    # Django's ``XSM_CELERY`` dict, seen by Celery as this key when the Celery config is read
    # from Django settings with ``namespace="CELERY"``: the Django app's own settings.
    "xsm_celery": None,
}
#: Keys a user's own extension accepts (``register_keys``), with their checks.
_registered: set[str] = set()
_registered_checks: dict[str, Check] = {}
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
    #: ``xsm_dead_letter_spool``: the directory where dead letters wait while the store is
    #: down (or while a killed write is finished by the redelivery).
    dead_letter_spool: str = DEFAULT_SPOOL_DIR
    #: ``xsm_workflow_outage_max_s``: how long a workflow step is retried, uncounted, while
    #: its store is down or its key is busy, before its message is dead-lettered.
    workflow_outage_max_s: float = DEFAULT_WORKFLOW_OUTAGE_MAX_S
    #: ``xsm_workflow_recovery_grace_s``: seconds a workflow timer or task step may be
    #: overdue before the Beat scan re-publishes it.
    workflow_recovery_grace_s: float = DEFAULT_WORKFLOW_RECOVERY_GRACE_S


_FIELDS = {f"{_PREFIX}{name}" for name in XsmSettings.__dataclass_fields__}


#: The URL spellings of a Redis (``xsm_celery.redis.connection`` opens them).
REDIS_URL_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)


def broker_redis_url(broker: object, transport_options: object) -> str | None:
    """The broker's URL when it names a Redis, else None.

    A ``sentinel://`` broker names its service in ``broker_transport_options['master_name']``
    (kombu's spelling); it is added to the URL as ``?master_name=``, which the fleet's own
    Redis client reads.
    """
    if not isinstance(broker, str) or not broker.lower().startswith(REDIS_URL_SCHEMES):
        return None
    name = transport_options.get("master_name") if isinstance(transport_options, dict) else None
    if not broker.lower().startswith("sentinel://") or not name or "master_name=" in broker:
        return broker
    joiner = "&" if "?" in broker.rsplit(";", 1)[-1] else "?"
    return f"{broker}{joiner}master_name={name}"


def register_keys(*keys: str, checks: Mapping[str, Check] | None = None) -> None:
    """Accept more ``xsm_`` keys, read by a project's own extension of the package.

    The package's own keys are all in ``DECLARED_KEYS``. Without this, ``read_settings``
    would refuse them as unknown. ``checks`` maps a key to its ``(key, value) -> value``
    check, run when the settings are read so a bad value stops the worker at start.
    """
    for key in (*keys, *(checks or {})):
        if not key.startswith(_PREFIX):
            raise ConfigurationError(f"setting {key!r} must start with {_PREFIX!r}")
        _registered.add(key)
    _registered_checks.update(checks or {})


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
            items = _xsm_items(app.conf, getattr(app, "namespace", None))
            cached = _build(items, app.conf)
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


def _build(items: Mapping[str, Any], conf: Mapping[str, Any] | None = None) -> XsmSettings:
    """Check every value's type and range, then the settings against each other and Celery's."""
    _refuse_unknown(items)
    values: dict[str, Any] = {}
    for key, value in items.items():
        if value is None:
            continue
        if key in _FIELDS:
            values[key[len(_PREFIX) :]] = FIELD_CHECKS[key[len(_PREFIX) :]](key, value)
        else:
            check = DECLARED_KEYS.get(key) or _registered_checks.get(key)
            if check is not None:
                check(key, value)
    settings = XsmSettings(**values)
    if conf is not None:
        check_markers_mode(settings.attempt_markers, conf)
        check_countdown_against_broker(settings.timer_countdown_max_s, conf)
    return settings


def _refuse_unknown(items: Iterable[str]) -> None:
    for key in items:
        if key not in _FIELDS and key not in DECLARED_KEYS and key not in _registered:
            known = _FIELDS | set(DECLARED_KEYS) | _registered
            raise ConfigurationError(unknown_name_message("Celery setting", key, known))
