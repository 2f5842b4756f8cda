"""The ``DeadLetter`` record: what an operator needs to triage or replay work that gave up.

Which machine, in which state, handling which event, after how many attempts, failing how,
and a redacted snapshot to resume from. The record is plain JSON data so every store
(memory, SQLite, SQLAlchemy, Django) and every broker sink can keep it unchanged, and the
same record shape serves chart dead letters, poison envelopes and exhausted Celery tasks.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from xsm_celery.errors import ConfigurationError
from xsm_celery.ids import new_id

__all__ = ["DeadLetter", "DeadLetterReason"]


class DeadLetterReason(str, enum.Enum):
    """Why a record was written; stored as its string value."""

    DEAD_LETTER_STATE = "dead_letter_state"
    MAX_ATTEMPTS = "max_attempts"
    UNKNOWN_EVENT = "unknown_event"
    CORRUPT = "corrupt"
    TASK_EXHAUSTED = "task_exhausted"
    NON_RETRYABLE = "non_retryable"
    WORKER_LOST = "worker_lost"
    INSTANCE_DONE = "instance_done"
    IDEMPOTENCY_MISMATCH = "idempotency_mismatch"
    DEFERRED_TOO_LONG = "deferred_too_long"
    #: A store refused a value the envelope carried (too long, over the snapshot cap).
    STORE_REFUSED = "store_refused"
    #: A chart task's attempt was killed by Celery's hard ``time_limit``, every attempt.
    TIME_LIMIT = "time_limit"


def _reason_value(value: str | DeadLetterReason) -> str:
    """The reason's string value; an unknown reason is refused with the valid ones listed."""
    try:
        return DeadLetterReason(value).value
    except ValueError:
        choices = ", ".join(repr(r.value) for r in DeadLetterReason)
        raise ConfigurationError(f"reason must be one of {choices}, got {value!r}") from None


@dataclass(frozen=True)
class DeadLetter:
    """One unit of work that gave up, with the context needed to triage or replay it.

    ``errors`` is oldest first, each ``{source, name, type, message}``; ``snapshot`` is the
    redacted machine snapshot (``{}`` when left out); ``taken_at`` and ``resolved_at`` are
    epoch seconds. The ``task_*`` and ``hostname`` fields are set for Celery tasks only,
    ``envelope`` and ``topic`` for event envelopes only.
    """

    machine_id: str
    state_id: str
    event: dict[str, Any]
    attempts: int | None
    errors: list[dict[str, str]]
    snapshot: dict[str, Any]
    taken_at: float
    id: str = field(default_factory=new_id)
    reason: str = DeadLetterReason.DEAD_LETTER_STATE.value
    envelope: dict[str, Any] | None = None
    topic: str | None = None
    machine_hash: str | None = None
    machine_version: str | None = None
    resolved_at: float | None = None
    task_name: str | None = None
    task_id: str | None = None
    task_args: list[Any] | None = None
    task_kwargs: dict[str, Any] | None = None
    hostname: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _reason_value(self.reason))
        if not isinstance(self.id, str) or not self.id:
            raise ConfigurationError(f"id must be a non-empty string, got {self.id!r}")

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain data, every field present."""
        return asdict(self)

    def to_json(self) -> str:
        """The record as JSON; a value JSON cannot carry is written as its ``str()``."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str, ensure_ascii=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeadLetter:
        """Rebuild a record from ``to_dict()`` output; unknown keys are ignored.

        Unknown keys are ignored so that a record written by a newer version still loads.

        Raises:
            ValueError: A required field is missing or the reason is unknown.
        """
        if not isinstance(raw, Mapping):
            raise ConfigurationError(
                f"a dead letter must be a JSON object, got {type(raw).__name__}"
            )
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in names}
        missing = sorted(
            f.name for f in fields(cls) if f.name not in values and _is_required(f.name)
        )
        if missing:
            raise ConfigurationError(f"dead letter is missing field(s) {', '.join(missing)}")
        values["taken_at"] = float(values["taken_at"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> DeadLetter:
        """Rebuild a record from ``to_json()`` output.

        Raises:
            ValueError: The text is not JSON or not a dead letter.
        """
        return cls.from_dict(json.loads(text))


_REQUIRED = frozenset(
    {"machine_id", "state_id", "event", "attempts", "errors", "snapshot", "taken_at"}
)


def _is_required(name: str) -> bool:
    return name in _REQUIRED
