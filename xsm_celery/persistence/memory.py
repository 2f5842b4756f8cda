"""The in-memory snapshot store, and the key and size rules every snapshot store shares."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from xsm_celery.engine.snapshot import DEFAULT_MAX_SNAPSHOT_BYTES
from xsm_celery.errors import ConflictError, LockTimeoutError, StoreError
from xsm_celery.persistence.protocols import StoredSnapshot

__all__ = [
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "MAX_KEY_LENGTH",
    "MemoryStore",
    "check_key",
    "check_snapshot",
]

#: The longest instance key a store accepts.
MAX_KEY_LENGTH = 200


def check_key(key: object) -> str:
    """Return ``key`` if it is usable as an instance key; raise ``StoreError`` otherwise.

    One rule for every backend: a non-empty string of at most ``MAX_KEY_LENGTH``
    characters without NUL, so a key that works in memory works in every database.
    """
    if not isinstance(key, str) or not key:
        raise StoreError(f"store key must be a non-empty string, got {key!r:.80}")
    if len(key) > MAX_KEY_LENGTH:
        raise StoreError(
            f"store key is {len(key)} characters, over the {MAX_KEY_LENGTH} limit: {key[:40]!r}..."
        )
    if "\x00" in key:
        raise StoreError(f"store key must not contain NUL: {key!r:.80}")
    return key


def check_snapshot(key: str, snapshot: object, max_bytes: int) -> str:
    """Return ``snapshot`` if it is a string within ``max_bytes``; else raise ``StoreError``."""
    if not isinstance(snapshot, str):
        raise StoreError(
            f"snapshot of {key!r} must be the JSON string get_snapshot() returns, "
            f"got {type(snapshot).__name__}"
        )
    size = len(snapshot.encode("utf-8"))
    if size > max_bytes:
        raise StoreError(
            f"snapshot of {key!r} is {size} bytes, over the {max_bytes}-byte cap; "
            "keep large data outside the machine's context"
        )
    return snapshot


class MemoryStore:
    """Thread-safe in-memory snapshot store for tests and single-process use.

    ``lock(key)`` is a per-key lock. ``transaction()`` keeps an undo log, so a save made
    in it is taken back when the block raises; outbox rows and inbox entries in memory
    stores of their own are not part of it.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._records: dict[str, StoredSnapshot] = {}
        self._mutex = threading.Lock()
        self._key_locks: dict[str, threading.RLock] = {}
        self._undo = threading.local()

    def __len__(self) -> int:
        with self._mutex:
            return len(self._records)

    def load(self, key: str) -> StoredSnapshot | None:
        """Return the record of ``key``, or ``None``."""
        with self._mutex:
            return self._records.get(check_key(key))

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot``; with ``expected_version`` only over that version."""
        check_key(key)
        check_snapshot(key, snapshot, self.max_bytes)
        with self._mutex:
            old = self._records.get(key)
            current = old.version if old else 0
            if expected_version is not None and current != expected_version:
                raise ConflictError(
                    f"snapshot {key!r} is at version {current}, expected {expected_version}; "
                    "another writer saved first: reload and retry"
                )
            record = StoredSnapshot(key, snapshot, current + 1, machine_version or "", time.time())
            self._records[key] = record
        journal: list[tuple[str, StoredSnapshot | None]] | None = getattr(self._undo, "log", None)
        if journal is not None:
            journal.append((key, old))
        return record.version

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""
        with self._mutex:
            return self._records.pop(check_key(key), None) is not None

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Return up to ``limit`` keys starting with ``prefix``, sorted."""
        with self._mutex:
            keys = sorted(k for k in self._records if k.startswith(prefix))
        return keys[: max(int(limit), 0)]

    @contextlib.contextmanager
    def lock(self, key: str, *, timeout: float = 10.0) -> Iterator[None]:
        """Hold ``key`` exclusively; ``LockTimeoutError`` after ``timeout`` seconds."""
        check_key(key)
        with self._mutex:
            lock = self._key_locks.setdefault(key, threading.RLock())
        if not lock.acquire(timeout=max(timeout, 0.0)):
            raise LockTimeoutError(
                f"lock on {key!r} not acquired within {timeout}s; another holder is slow or stuck"
            )
        try:
            yield
        finally:
            lock.release()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Apply saves at once, and take this thread's saves back if the block raises."""
        outer: list[tuple[str, StoredSnapshot | None]] | None = getattr(self._undo, "log", None)
        journal: list[tuple[str, StoredSnapshot | None]] = []
        self._undo.log = journal
        try:
            yield
        except BaseException:
            with self._mutex:
                for key, old in reversed(journal):
                    if old is None:
                        self._records.pop(key, None)
                    else:
                        self._records[key] = old
            raise
        finally:
            self._undo.log = outer
        if outer is not None:
            outer.extend(journal)
