"""Sortable identifiers for envelopes, dead letters and outbox rows.

An id is a UUIDv7-style value: a 48-bit millisecond timestamp followed by randomness, so ids
sort by creation time as plain strings (useful for "newest first" in stores and the admin).
Within one process ids are strictly increasing even when the clock stalls or steps back.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

from xsm_celery.errors import ConfigurationError

__all__ = ["new_id"]

_lock = threading.Lock()
_last = 0


def new_id(now_ms: int | None = None) -> str:
    """Return a new UUIDv7-style id, strictly greater than the previous one in this process.

    Args:
        now_ms: The timestamp to embed, in epoch milliseconds; the wall clock by default.
    """
    global _last
    ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    if ms < 0 or ms >= 1 << 48:
        raise ConfigurationError(f"now_ms must be in [0, 2**48), got {now_ms!r}")
    rand = int.from_bytes(os.urandom(10), "big") & ((1 << 74) - 1)
    with _lock:
        high = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64)
        value = high | (0b10 << 62) | (rand & ((1 << 62) - 1))
        if value <= _last:
            value = _last + 1
        _last = value
    return str(uuid.UUID(int=value))
