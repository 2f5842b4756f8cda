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

from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS, mask_text, redact, secret_values
from xsm_celery.patterns.dead_letter.record import DeadLetter

__all__ = ["mask_errors", "plain_json", "redact_record"]


def redact_record(record: DeadLetter, keys: Iterable[str] = DEFAULT_REDACT_KEYS) -> DeadLetter:
    """Return ``record`` with its event, snapshot, envelope and task arguments redacted.

    The values found under secret keys are also masked inside the error messages (where an
    ``f"bad key {api_key}"`` copied them), and so is every well-known token shape.
    ``keys`` replaces the default list of secret-looking key fragments.
    """
    chosen = keys if keys is DEFAULT_REDACT_KEYS else tuple(keys)

    def mask(value: Any) -> Any:
        return None if value is None else redact(value, chosen)

    secrets = secret_values(
        [record.event, record.snapshot, record.envelope, record.task_args, record.task_kwargs],
        chosen,
    )
    return replace(
        record,
        errors=mask_errors(record.errors, secrets),
        event=mask(record.event),
        snapshot=mask(record.snapshot),
        envelope=mask(record.envelope),
        task_args=mask(record.task_args),
        task_kwargs=mask(record.task_kwargs),
    )


def mask_errors(errors: Iterable[Any], secrets: Iterable[str]) -> list[Any]:
    """Error entries with ``secrets`` and token shapes masked in every text field."""
    known = tuple(secrets)
    masked: list[Any] = []
    for entry in errors:
        if isinstance(entry, dict):
            masked.append(
                {k: mask_text(v, known) if isinstance(v, str) else v for k, v in entry.items()}
            )
        else:
            masked.append(entry)
    return masked


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
