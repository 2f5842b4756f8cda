"""Make a dead letter safe to store or show: secrets masked, plain JSON only.

Every store redacts a record again when it writes it, because a record may come from a
producer or a plugin configured with a shorter key list; the memory, SQLite, SQLAlchemy and
Django stores and the broker sink all use these two functions, so they mask the same fields
the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS, redact
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["plain_json", "redact_record"]


def redact_record(record: DeadLetter, keys: Iterable[str] = DEFAULT_REDACT_KEYS) -> DeadLetter:
    """Return ``record`` with its event, snapshot, envelope and task arguments redacted.

    ``keys`` replaces the default list of secret-looking key fragments.
    """
    chosen = keys if keys is DEFAULT_REDACT_KEYS else tuple(keys)

    def mask(value: Any) -> Any:
        return None if value is None else redact(value, chosen)

    return replace(
        record,
        event=mask(record.event),
        snapshot=mask(record.snapshot),
        envelope=mask(record.envelope),
        task_args=mask(record.task_args),
        task_kwargs=mask(record.task_kwargs),
    )


def plain_json(value: Any) -> Any:
    """Plain JSON data: what JSON cannot carry becomes its ``str()``, as ``to_json()`` does.

    Non-finite floats become strings too, because PostgreSQL's JSON type refuses NaN.
    """
    return _finite(json.loads(json.dumps(value, default=str, ensure_ascii=False)))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
