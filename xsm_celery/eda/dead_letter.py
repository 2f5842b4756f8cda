"""Dead letters for envelopes: redaction, the SQLite store, and the broker sink.

Both sources of dead letters share one record, ``xsm_celery.patterns.DeadLetter``: chart
states captured by ``DeadLetterPlugin`` and envelopes the dispatcher gave up on
(``max_attempts``, ``unknown_event``, ``corrupt``). Records are redacted before they are
shown or exported, and again when a store writes them, because a record may come from a
producer or a plugin configured with a shorter key list.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from xsm_celery.eda.envelope import Envelope, EnvelopeTooLargeError
from xsm_celery.engine.awaiting import finish
from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS
from xsm_celery.errors import ArgumentTypeError, ConfigurationError
from xsm_celery.patterns.dead_letter import DeadLetter, check_cutoff, check_limit
from xsm_celery.patterns.dead_letter.redaction import redact_record
from xsm_celery.persistence.sqlite import SQLiteDatabase

__all__ = [
    "DEAD_LETTER_EVENT_TYPE",
    "BrokerDeadLetterSink",
    "SQLiteDeadLetterStore",
    "dlq_topic",
    "redact_record",
]

logger = logging.getLogger(__name__)

#: The CloudEvents type ``BrokerDeadLetterSink`` publishes records under.
DEAD_LETTER_EVENT_TYPE = "xsm.deadletter"


def dlq_topic(topic: str) -> str:
    """Return the dead-letter topic of ``topic``: ``orders`` becomes ``orders.dlq``."""
    if not isinstance(topic, str) or not topic:
        raise ConfigurationError(f"topic must be a non-empty string, got {topic!r}")
    return f"{topic}.dlq"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS xsm_dead_letters (
    id TEXT PRIMARY KEY,
    taken_at REAL NOT NULL,
    resolved_at REAL,
    reason TEXT NOT NULL,
    machine_id TEXT NOT NULL,
    inserted INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS xsm_dead_letters_taken ON xsm_dead_letters (taken_at, id);
CREATE TABLE IF NOT EXISTS xsm_dead_letter_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    outcome TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS xsm_dead_letter_audit_record ON xsm_dead_letter_audit (record_id)
"""


def _load(body: str, resolved_at: float | None) -> DeadLetter:
    return replace(DeadLetter.from_json(body), resolved_at=resolved_at)


class SQLiteDeadLetterStore:
    """Dead letters and their audit trail in one SQLite file (mode 0600, WAL).

    Records are redacted again on write. The audit table outlives the records, so a purge
    or a replay stays on file after the record is gone.

    Args:
        path: A file path, ``":memory:"``, or a shared ``SQLiteDatabase``.
        redact_keys: Keys masked on write in addition to the default list.
        wall: Epoch-seconds clock for ``resolved_at`` and audit times.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | SQLiteDatabase,
        *,
        redact_keys: Iterable[str] = (),
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.db = path if isinstance(path, SQLiteDatabase) else SQLiteDatabase(path)
        self._keys = DEFAULT_REDACT_KEYS + tuple(redact_keys)
        self._wall = wall
        self.db.script(_SCHEMA)

    def __call__(self, record: DeadLetter) -> str:
        """Store ``record``: a store is a sink."""
        return self.put(record)

    def __len__(self) -> int:
        return int(self.db.query("SELECT COUNT(*) FROM xsm_dead_letters")[0][0])

    def put(self, record: DeadLetter) -> str:
        """Store ``record`` redacted (replacing one with the same id); return its id."""
        if not isinstance(record, DeadLetter):
            raise ArgumentTypeError(f"put() takes a DeadLetter, got {type(record).__name__}")
        clean = redact_record(record, self._keys)
        with self.db.transaction() as conn:
            seq = conn.execute("SELECT COALESCE(MAX(inserted), 0) + 1 FROM xsm_dead_letters")
            conn.execute(
                "INSERT OR REPLACE INTO xsm_dead_letters "
                "(id, taken_at, resolved_at, reason, machine_id, inserted, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    clean.id,
                    clean.taken_at,
                    clean.resolved_at,
                    clean.reason,
                    clean.machine_id,
                    seq.fetchone()[0],
                    clean.to_json(),
                ),
            )
        return record.id

    def get(self, record_id: str) -> DeadLetter | None:
        """Return the record with ``record_id``, or ``None``."""
        rows = self.db.query(
            "SELECT body, resolved_at FROM xsm_dead_letters WHERE id = ?", (record_id,)
        )
        return _load(*rows[0]) if rows else None

    def list(self, limit: int = 100, include_resolved: bool = False) -> builtins.list[DeadLetter]:
        """Return up to ``limit`` records, newest first; resolved ones only when asked."""
        check_limit(limit)
        where = "" if include_resolved else "WHERE resolved_at IS NULL "
        rows = self.db.query(
            f"SELECT body, resolved_at FROM xsm_dead_letters {where}"
            "ORDER BY taken_at DESC, id DESC LIMIT ?",
            (limit,),
        )
        return [_load(*row) for row in rows]

    def all(self) -> builtins.list[DeadLetter]:
        """Return every record, resolved or not, oldest first (insertion order)."""
        rows = self.db.query("SELECT body, resolved_at FROM xsm_dead_letters ORDER BY inserted")
        return [_load(*row) for row in rows]

    def mark_resolved(self, record_id: str, resolved_at: float | None = None) -> bool:
        """Mark a record resolved; ``False`` when there is no such record."""
        when = self._wall() if resolved_at is None else check_cutoff(resolved_at)
        cursor = self.db.write(
            "UPDATE xsm_dead_letters SET resolved_at = ? WHERE id = ?", (when, record_id)
        )
        return cursor.rowcount > 0

    def delete(self, record_id: str) -> bool:
        """Remove a record (its audit entries stay); ``False`` when there was none."""
        return self.db.write("DELETE FROM xsm_dead_letters WHERE id = ?", (record_id,)).rowcount > 0

    def purge_older_than(self, cutoff_wall: float) -> int:
        """Remove records taken before ``cutoff_wall`` (epoch seconds); return how many."""
        cutoff = check_cutoff(cutoff_wall)
        return self.db.write("DELETE FROM xsm_dead_letters WHERE taken_at < ?", (cutoff,)).rowcount

    def audit(self, record_id: str, action: str, *, actor: str, reason: str, outcome: str) -> None:
        """Append one operator action (replay, resolve, purge) to the audit table."""
        self.db.write(
            "INSERT INTO xsm_dead_letter_audit (record_id, action, actor, reason, outcome, at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (record_id, action, actor, reason, outcome, self._wall()),
        )

    def audit_log(self, record_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Return audit entries oldest first; only ``record_id``'s when given."""
        sql = "SELECT record_id, action, actor, reason, outcome, at FROM xsm_dead_letter_audit"
        params: tuple[str, ...] = ()
        if record_id is not None:
            sql, params = sql + " WHERE record_id = ?", (record_id,)
        names = ("record_id", "action", "actor", "reason", "outcome", "at")
        return [
            dict(zip(names, row, strict=True))
            for row in self.db.query(sql + " ORDER BY seq", params)
        ]

    def close(self) -> None:
        """Close the database."""
        self.db.close()


class BrokerDeadLetterSink:
    """Publish each dead letter to ``<topic>.dlq`` as ``xsm.deadletter``, and keep it in a store.

    Pass it as a ``DeadLetterPlugin`` sink or as the dispatcher's ``dead_letters``. The
    published record is redacted; one too large for an envelope goes out without its
    snapshot. With ``store`` the record is also put there (first, so a broker outage does
    not lose it) and the store's reading methods are available on the sink.

    Args:
        broker: A sync or async broker adapter.
        topic: The base topic; records go to ``dlq_topic(topic)``.
        store: An optional dead-letter store to keep the records in as well.
    """

    def __init__(self, broker: Any, topic: str, *, store: Any = None) -> None:
        self.broker = broker
        self.topic = dlq_topic(topic)
        self.store = store

    def __call__(self, record: DeadLetter) -> str:
        """Keep and publish ``record``; return its id."""
        return self.put(record)

    def put(self, record: DeadLetter) -> str:
        """Keep ``record`` in the store (if any), then publish it; return its id."""
        if self.store is not None:
            self.store.put(record)
        self._publish(self._envelope(redact_record(record)))
        return record.id

    def _envelope(self, record: DeadLetter) -> Envelope:
        data = json.loads(record.to_json())
        env = Envelope.new(
            type=DEAD_LETTER_EVENT_TYPE,
            subject=record.id,
            source=f"xsm/{record.machine_id}",
            data=data,
        )
        try:
            env.to_json()
        except EnvelopeTooLargeError:
            env = env.replace(data={**data, "snapshot": {}, "envelope": None})
        return env

    def _publish(self, env: Envelope) -> None:
        finish(self.broker.publish(self.topic, env), "publishing a dead letter")

    def __getattr__(self, name: str) -> Any:
        if (
            name
            in {
                "get",
                "list",
                "all",
                "mark_resolved",
                "delete",
                "purge_older_than",
                "audit",
                "audit_log",
            }
            and self.__dict__.get("store") is not None
        ):
            return getattr(self.store, name)
        raise AttributeError(name)
