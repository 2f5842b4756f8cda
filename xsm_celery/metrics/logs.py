"""One structured log record per retry, give-up, dead letter, replay and deferral.

Log pipelines index fields, not sentences, so every record carries its facts in ``extra``
under stable names prefixed ``xsm_`` (``xsm_event``, ``xsm_task``, ``xsm_reason``,
``xsm_delay_s``, ...): the prefix keeps them clear of ``LogRecord``'s own attributes. The
fields are the fact's bounded ones, passed through the package's redaction, so a field
named like a secret is masked, and a task's arguments are never there to begin with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from xsm_celery.engine.redact import redact
from xsm_celery.hooks import Fact, FactKind, subscribe

__all__ = ["FIELD_PREFIX", "LOGGER_NAME", "FactLogger", "install_logging", "log_fields"]

#: The logger the records go to.
LOGGER_NAME = "xsm_celery.facts"
#: The prefix of every structured field.
FIELD_PREFIX = "xsm_"

_MESSAGES: dict[FactKind, tuple[int, str]] = {
    FactKind.RETRY_SCHEDULED: (logging.WARNING, "retry scheduled"),
    FactKind.GAVE_UP: (logging.ERROR, "gave up"),
    FactKind.DEAD_LETTER_WRITTEN: (logging.ERROR, "dead letter written"),
    FactKind.DEAD_LETTER_REPLAYED: (logging.INFO, "dead letter replayed"),
    FactKind.LIMIT_DEFERRED: (logging.INFO, "deferred by a limit"),
}
_SUMMARY = (
    "task",
    "task_id",
    "attempt",
    "exception",
    "delay_s",
    "reason",
    "source",
    "limit",
    "machine",
    "topic",
)


def log_fields(kind: FactKind, fields: Mapping[str, object]) -> dict[str, Any]:
    """The ``extra`` of one record: ``xsm_event`` and each plain field, redacted."""
    plain = {
        name: value
        for name, value in fields.items()
        if value is None or isinstance(value, str | bool | int | float)
    }
    masked: dict[str, Any] = redact(plain)
    return {"xsm_event": kind.value, **{f"{FIELD_PREFIX}{k}": v for k, v in masked.items()}}


class FactLogger:
    """Write the facts of ``_MESSAGES`` to the ``xsm_celery.facts`` logger."""

    #: The kinds it logs: subscribe it to these only (``hooks.subscribe(handle, KINDS)``).
    KINDS = frozenset(_MESSAGES)

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(LOGGER_NAME)

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber."""
        found = _MESSAGES.get(fact.kind)
        if found is None:
            return
        level, message = found
        if not self.logger.isEnabledFor(level):
            return
        extra = log_fields(fact.kind, fact.fields)
        summary = " ".join(
            f"{name}={extra[FIELD_PREFIX + name]}"
            for name in _SUMMARY
            if extra.get(FIELD_PREFIX + name) is not None
        )
        self.logger.log(level, "%s: %s", message, summary, extra=extra)


def install_logging(logger: logging.Logger | None = None) -> FactLogger:
    """Create the fact logger and subscribe it; return it."""
    fact_logger = FactLogger(logger)
    subscribe(fact_logger.handle, FactLogger.KINDS)
    return fact_logger
