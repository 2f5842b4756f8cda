"""What the demo's tasks do, as a log the worker processes append to and the runner reads.

Celery's own events need a broker with fan-out, which the embedded SQLite broker lacks, so
the demo's worker signals write here instead; the runner polls the log to draw the live view.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from xsm_celery.demo.shared_db import connect

__all__ = ["ProgressEvent", "ProgressLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS progress (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id  TEXT NOT NULL,
    order_id TEXT NOT NULL,
    kind     TEXT NOT NULL,
    attempt  INTEGER,
    delay_ms REAL,
    detail   TEXT NOT NULL DEFAULT ''
);
"""


@dataclass(frozen=True)
class ProgressEvent:
    """One thing that happened to a task.

    ``kind`` is ``ready`` (a worker started), ``started`` (an attempt began),
    ``retrying`` (the chart scheduled another attempt ``delay_ms`` from now),
    ``succeeded`` or ``failed`` (the task ended).
    """

    seq: int
    task_id: str
    order_id: str
    kind: str
    attempt: int | None
    delay_ms: float | None
    detail: str


class ProgressLog:
    """The log in the SQLite file ``path``."""

    def __init__(self, path: Path) -> None:
        self._conn = connect(path, _SCHEMA)
        self._lock = threading.Lock()

    def add(
        self,
        task_id: str,
        order_id: str,
        kind: str,
        *,
        attempt: int | None = None,
        delay_ms: float | None = None,
        detail: str = "",
    ) -> None:
        """Append one event."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO progress (task_id, order_id, kind, attempt, delay_ms, detail) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (task_id, order_id, kind, attempt, delay_ms, detail),
            )

    def since(self, seq: int) -> list[ProgressEvent]:
        """Events after ``seq``, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, task_id, order_id, kind, attempt, delay_ms, detail "
                "FROM progress WHERE seq > ? ORDER BY seq",
                (seq,),
            ).fetchall()
        return [ProgressEvent(*row) for row in rows]
