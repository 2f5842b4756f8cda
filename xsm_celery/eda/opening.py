"""Opening the outbox and the dead-letter store from a setting, typed; ``memory://`` dead letters.

The seam (``xsm_celery.persistence.opening``) sits below this layer, so it opens these two
kinds as ``object``: their protocols are eda's ``OutboxStore`` (rows are envelopes) and the
dead-letter store of ``patterns``. ``open_outbox`` and ``open_dead_letters`` are the seam with
those types. This module also registers the ``memory://`` dead-letter store, which the seam
imports the first time such a URL is opened: one store per name in the process
(``memory://jobs``), so a worker's tasks and the test that inspects them see the same one.
"""

from __future__ import annotations

import threading
from typing import Unpack, cast

from xsm_celery.eda.outbox_protocols import OutboxStore
from xsm_celery.patterns.dead_letter import DeadLetterStoreProtocol, MemoryDeadLetterStore
from xsm_celery.persistence.opening import OpenOptions, open_store, register_scheme

__all__ = ["named_dead_letter_store", "open_dead_letters", "open_outbox", "reset_memory_stores"]

_memory: dict[str, MemoryDeadLetterStore] = {}
_memory_lock = threading.Lock()


def open_outbox(value: object, **options: Unpack[OpenOptions]) -> OutboxStore:
    """The outbox a URL or an object names (see ``xsm_celery.persistence.opening``)."""
    return cast(OutboxStore, open_store(value, "outbox", **options))


def open_dead_letters(value: object, **options: Unpack[OpenOptions]) -> DeadLetterStoreProtocol:
    """The dead-letter store a URL or an object names (see ``xsm_celery.persistence.opening``)."""
    return cast(DeadLetterStoreProtocol, open_store(value, "dead_letters", **options))


def named_dead_letter_store(url: str) -> MemoryDeadLetterStore:
    """The process's dead-letter store named by ``memory://<name>`` (made on first use)."""
    name = url.split("://", 1)[1] if "://" in url else ""
    with _memory_lock:
        store = _memory.get(name)
        if store is None:
            store = _memory[name] = MemoryDeadLetterStore()
        return store


def reset_memory_stores() -> None:
    """Forget every named in-memory dead-letter store (for tests)."""
    with _memory_lock:
        _memory.clear()


register_scheme(
    "memory", lambda r: named_dead_letter_store(r.url), kinds=["dead_letters"], replace=False
)
