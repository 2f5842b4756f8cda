"""A durable local spool of dead letters: nothing given up is only in a log line.

A chart task writes its dead letter here first (one JSON file per record, written to a
temporary name, flushed to disk and renamed, so a kill leaves either the whole file or
none), then to the store, and deletes the file once the store has it. So:

* the store is down at give-up: the record stays in the spool and is written by the next
  give-up that reaches the store, or by ``flush`` (``xsm-celery dlq flush-spool``);
* the worker is killed during the store write: the redelivered message finds the record
  here, with the real error chain, and finishes writing it instead of running again.

Every prefork child of a worker shares the spool directory; records are named by their id
(one per task run, see ``dead_letter_id``), so writing one twice is harmless. A record the
store has leaves a ``.done`` tombstone for a day, so the redelivery of a run killed just
after the write knows without opening the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from xsm_celery.patterns import DeadLetter

__all__ = [
    "DEFAULT_SPOOL_DIR",
    "FLUSH_BATCH",
    "TOMBSTONE_KEEP_S",
    "DeadLetterSpool",
    "dead_letter_id",
    "run_id",
]

logger = logging.getLogger(__name__)

#: Where the spool lives when ``xsm_dead_letter_spool`` is not set: next to the default
#: SQLite store, in the worker's working directory.
DEFAULT_SPOOL_DIR = "xsm_celery.spool"

#: Records one ``flush`` writes at most, so a give-up never stalls behind a long backlog.
FLUSH_BATCH = 100

#: How long a ``.done`` tombstone is kept: as long as an attempt marker lives by default.
TOMBSTONE_KEEP_S = 86_400.0

_NAMESPACE = uuid.UUID("6d1c3f0e-9b7a-4f51-8a43-1f0c5e2b7d90")


def dead_letter_id(task_id: str, attempts: int | None) -> str:
    """The id of the dead letter of one task run: the same for every retry of the write.

    A redelivery after a kill gives up at the same attempt of the same task id, so it
    computes the same id and finds the record instead of writing a second one. A replay
    sends a new task id, so it gets a record of its own.
    """
    return uuid.uuid5(_NAMESPACE, f"{task_id}:{attempts}").hex


def run_id(task_id: str, workflow: Mapping[str, str] | None) -> str:
    """What a dead letter's id is made of: the task id, and the record a replay re-sent.

    A replayed task step keeps its task id (the instance waits for it), so without the
    replayed record's id its next give-up would find the old, resolved record and write
    none.
    """
    replay = (workflow or {}).get("replay")
    return f"{task_id}:replay:{replay}" if replay else task_id


class DeadLetterSpool:
    """Dead letters waiting on local disk for the store (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, record_id: str) -> Path:
        return self.directory / f"{record_id}.json"

    def keep(self, record: DeadLetter) -> Path:
        """Write ``record`` durably (mode 0600); return its file."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self._path(record.id)
        temporary = final.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(record.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
        return final

    def get(self, record_id: str) -> DeadLetter | None:
        """The spooled record ``record_id``, or None."""
        try:
            return DeadLetter.from_json(self._path(record_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def remove(self, record_id: str) -> None:
        """Note that the store has the record: its file becomes a ``.done`` tombstone.

        The tombstone tells a redelivery of a run killed right after the write that the
        record is written, without opening the store; ``flush`` deletes old tombstones.
        """
        path = self._path(record_id)
        with contextlib.suppress(FileNotFoundError):
            path.replace(path.with_suffix(".done"))

    def written(self, record_id: str) -> bool:
        """Whether this spool saw ``record_id`` reach the store (a recent tombstone)."""
        return self._path(record_id).with_suffix(".done").exists()

    def _forget_old_tombstones(self, now: float) -> None:
        for path in self.directory.glob("*.done"):
            if now - _mtime(path) > TOMBSTONE_KEEP_S:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def ids(self) -> Iterator[str]:
        """The ids of the spooled records, oldest file first."""
        if not self.directory.is_dir():
            return iter(())
        files = sorted(self.directory.glob("*.json"), key=_mtime)
        return (path.stem for path in files)

    def __len__(self) -> int:
        return sum(1 for _ in self.ids())

    def write_through(self, store: Any, record: DeadLetter) -> bool:
        """Put ``record`` in ``store`` unless it is there already; drop it from the spool.

        Returns whether this call wrote it. A record already in the store (written by a
        run killed before it could delete its file) is left as it is, so an operator's
        resolution or the real error chain is never overwritten.
        """
        getter = getattr(store, "get", None)
        exists = getter is not None and getter(record.id) is not None
        if not exists:
            store.put(record)
        self.remove(record.id)
        return not exists

    def flush(self, store: Any, *, limit: int = FLUSH_BATCH) -> int:
        """Write up to ``limit`` spooled records to ``store``; return how many were written.

        Stops at the first failure (the store is still down); the rest stay for next time.
        """
        written = 0
        if self.directory.is_dir():
            self._forget_old_tombstones(time.time())
        for record_id in list(self.ids())[:limit]:
            try:
                record = self.get(record_id)
            except ValueError:
                self._set_aside(record_id)
                continue
            if record is None:
                continue
            try:
                written += int(self.write_through(store, record))
            except Exception:
                logger.warning(
                    "dead-letter store still failing; %d record(s) stay spooled in %s",
                    len(self),
                    self.directory,
                    exc_info=True,
                )
                break
        return written

    def _set_aside(self, record_id: str) -> None:
        """Rename an unreadable file to ``.bad`` so it is kept for a human but not retried."""
        path = self._path(record_id)
        with contextlib.suppress(FileNotFoundError):
            path.replace(path.with_suffix(".bad"))
        logger.error(
            "spooled dead letter %s is unreadable; kept as %s", record_id, path.with_suffix(".bad")
        )


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
