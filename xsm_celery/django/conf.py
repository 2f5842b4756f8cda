"""Settings of the app, read lazily from the one ``XSM_CELERY`` dict.

Nothing is read at import time: every caller asks ``get_settings()`` when it needs a value,
so ``override_settings(XSM_CELERY=...)`` in tests and late configuration both work.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings as django_settings

from xsm_celery.checks import key_names, positive_int, unknown_name_message
from xsm_celery.eda.relay import DEFAULT_BATCH, DEFAULT_MAX_ATTEMPTS
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S

__all__ = ["XsmDjangoSettings", "get_settings", "import_string"]

#: Rows a relay leases per run: the relay's own default.
DEFAULT_RELAY_BATCH = DEFAULT_BATCH
#: Seconds a relay owns the rows it claimed: the stores' ``DEFAULT_CLAIM_LEASE_S``.
DEFAULT_RELAY_LEASE_S = DEFAULT_CLAIM_LEASE_S
#: Upper bound on the records one bulk replay from the admin may touch.
DEFAULT_BULK_REPLAY_LIMIT = 500


@dataclass(frozen=True)
class XsmDjangoSettings:
    """The resolved ``XSM_CELERY`` settings; every key is optional.

    Attributes mirror the upper-case keys of the dict (``DATABASE`` -> ``database``).
    """

    #: Database alias the stores and the admin operations use.
    database: str = "default"
    #: Dotted path (``proj.celery:app`` or ``proj.celery.app``) of the Celery app that
    #: replays go through; ``None`` uses Celery's current app.
    celery_app: str | None = None
    #: Machine id -> chart JSON file path or dotted path of a dict, for the admin diagram.
    charts: Mapping[str, str] = field(default_factory=dict)
    #: Extra keys masked (besides the engine's defaults) when records are shown.
    redact_keys: tuple[str, ...] = ()
    #: Dotted path of a zero-argument factory returning the relay's SyncBrokerAdapter.
    broker: str | None = None
    #: Dotted path of the InboundDispatcher (or a factory of one) that envelope dead
    #: letters are replayed through; without it the admin replays task dead letters only.
    dispatcher: str | None = None
    relay_batch: int = DEFAULT_RELAY_BATCH
    relay_lease_s: float = DEFAULT_RELAY_LEASE_S
    #: Broker refusals of one outbox row before ``xsm_relay`` sets it aside as failed.
    relay_max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: Rows one ``xsm_timers`` run fires at most.
    timers_batch: int = DEFAULT_RELAY_BATCH
    bulk_replay_limit: int = DEFAULT_BULK_REPLAY_LIMIT
    #: The permission that lets an admin user reset a fleet breaker, limiter or slot pool
    #: (others see the fleet page read-only).
    fleet_reset_permission: str = "xsm_celery.replay_deadletterrecord"


_KEYS = {f.name.upper(): f.name for f in fields(XsmDjangoSettings)}


def get_settings() -> XsmDjangoSettings:
    """Read ``settings.XSM_CELERY`` now and return it validated.

    Raises:
        ConfigurationError: for an unknown key (with the closest valid one) or a bad value.
    """
    raw = getattr(django_settings, "XSM_CELERY", None) or {}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"XSM_CELERY must be a dict, got {type(raw).__name__}; "
            "write XSM_CELERY = {'DATABASE': 'default', ...} in settings.py"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _KEYS:
            raise ConfigurationError(unknown_name_message("XSM_CELERY key", str(key), _KEYS))
        values[_KEYS[key]] = value
    if "redact_keys" in values:
        try:
            values["redact_keys"] = key_names("XSM_CELERY['REDACT_KEYS']", values["redact_keys"])
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    resolved = XsmDjangoSettings(**values)
    _check(resolved)
    return resolved


def _check(conf: XsmDjangoSettings) -> None:
    for name in ("relay_batch", "relay_max_attempts", "timers_batch", "bulk_replay_limit"):
        try:
            positive_int(f"XSM_CELERY[{name.upper()!r}]", getattr(conf, name))
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    if not isinstance(conf.relay_lease_s, (int, float)) or not conf.relay_lease_s > 0:
        raise ConfigurationError(
            f"XSM_CELERY['RELAY_LEASE_S'] must be a positive number, got {conf.relay_lease_s!r}"
        )
    if conf.database not in django_settings.DATABASES:
        raise ConfigurationError(
            f"XSM_CELERY['DATABASE'] is {conf.database!r}, which is not in DATABASES "
            f"({', '.join(django_settings.DATABASES)}); name one of those aliases"
        )


def import_string(path: str) -> Any:
    """Import ``module:attr`` or ``module.attr`` and return the attribute.

    Raises:
        ConfigurationError: when the module or the attribute cannot be found.
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot import {path!r} ({exc}); give 'package.module:attribute'"
        ) from exc
