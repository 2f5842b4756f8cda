"""The demo's embedded broker: kombu's SQLAlchemy transport on a SQLite file, with three fixes.

kombu's ``sqla`` transport needs no server, which is what a demo on a fresh machine wants,
but four of its defaults get in the way of a lively, honest demo:

* It marks a requeued message as redelivered only at the top of the stored payload, where
  Celery does not look; Celery reads ``delivery_info['redelivered']`` (as the Redis and
  AMQP transports set it), and that is how a chart task tells a worker that died from a
  message that was merely handed back. ``Channel._restore`` sets it there too.
* It polls an empty queue once a second, and passes every transport option to
  ``create_engine`` (so ``polling_interval`` cannot be set); the demo polls every 100 ms.
* A channel's session is not thread-safe, yet a prefork worker on a polling transport
  uses it from two threads: the consumer polls while the pool's result thread requeues
  the message of a pool process that died. Every session use here holds a lock.
* Its engines are cached per class and would cross Celery's prefork ``fork()``; a child
  drops the inherited connections (``Engine.dispose(close=False)``) and opens its own. SQLite
  runs in WAL mode so the worker's processes and the demo's publisher do not block each other.
* On a polling transport the pool's supervisor thread forks a replacement for a dead pool
  process while the consumer thread may be inside ``_get``, holding SQLite's write lock.
  SQLite keeps its lock state per process, so the child inherits "another connection of
  this process holds the write lock" from a connection it never uses, and every write it
  tries waits out the busy timeout, for ever. One lock per process guards every session use,
  and a fork waits for it (``os.register_at_fork``), so no child is born mid-transaction.

Use it with ``broker_transport = "xsm_celery.demo.broker:Transport"`` and a plain
``sqlite:///path`` broker URL.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import sqlalchemy as sa
from kombu.transport import sqlalchemy as kombu_sqla

__all__ = ["POLLING_INTERVAL_S", "TRANSPORT", "Channel", "Transport"]

#: Seconds between polls of an empty queue.
POLLING_INTERVAL_S = 0.1

#: The value of Celery's ``broker_transport`` setting that selects this transport.
TRANSPORT = "xsm_celery.demo.broker:Transport"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=15000")
    finally:
        cursor.close()


#: Held around every session use in this process, and by ``fork()`` (see the docstring).
_SESSION_LOCK = threading.RLock()


class Channel(kombu_sqla.Channel):
    """kombu's SQLAlchemy channel, with redelivery flagged where Celery reads it."""

    _engines: dict[str, Any] = {}  # noqa: RUF012 (kombu's class-level engine cache)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._session_lock = _SESSION_LOCK
        super().__init__(*args, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        with self._session_lock:
            super()._new_queue(queue, **kwargs)

    # kombu's stubs name the argument "message" on the base channel, "payload" here.
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        with self._session_lock:
            super()._put(queue, message, **kwargs)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        del timeout  # kombu's SQLAlchemy channel polls; it takes no timeout
        with self._session_lock:
            return super()._get(queue)

    def _purge(self, queue: str) -> int:
        with self._session_lock:
            return int(super()._purge(queue))

    def _size(self, queue: str) -> int:
        with self._session_lock:
            return int(super()._size(queue))

    def _engine_from_config(self) -> Any:
        engine = super()._engine_from_config()
        if engine.dialect.name == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine

    def _restore(self, message: Any) -> None:
        message.delivery_info["redelivered"] = True
        super()._restore(message)


def _dispose_inherited_engines() -> None:
    _SESSION_LOCK.release()
    for engine, _session in Channel._engines.values():
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_SESSION_LOCK.acquire,
        after_in_parent=_SESSION_LOCK.release,
        after_in_child=_dispose_inherited_engines,
    )


class Transport(kombu_sqla.Transport):
    """kombu's SQLAlchemy transport using the channel above, polling every 100 ms."""

    Channel = Channel
    polling_interval = POLLING_INTERVAL_S
