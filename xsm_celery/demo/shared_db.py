"""A small SQLite file shared by the demo's worker processes and its runner."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

__all__ = ["connect"]


def connect(path: Path, schema: str) -> sqlite3.Connection:
    """Open ``path`` (created mode 0600), in WAL mode so several processes can write.

    Autocommit mode: every statement is its own transaction, which is all the demo needs.
    """
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, timeout=15, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(schema)
    return conn
