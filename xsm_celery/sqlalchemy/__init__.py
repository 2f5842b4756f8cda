"""SQLAlchemy stores in SQLite or PostgreSQL: snapshots, inbox, outbox, dead letters, timers,
idempotency keys.

Needs the ``sqlalchemy`` extra; PostgreSQL URLs also need ``psycopg``. Every store takes an
``Engine`` or a URL (``make_engine``: SQLite files created 0600, ``postgresql://`` through
psycopg); ``open_dead_letter_store`` also accepts a store object or ``memory://``.
"""

from __future__ import annotations

from xsm_celery import errors as _errors

try:
    import sqlalchemy  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="sqlalchemy", module="sqlalchemy") from exc

from xsm_celery.sqlalchemy.connect import make_engine
from xsm_celery.sqlalchemy.dead_letters import SQLAlchemyDeadLetterStore
from xsm_celery.sqlalchemy.idempotency import SQLAlchemyIdempotencyStore
from xsm_celery.sqlalchemy.inbox import SQLAlchemyInbox
from xsm_celery.sqlalchemy.outbox import LEASE_COLUMNS, SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyDatabase, SQLAlchemyStore
from xsm_celery.sqlalchemy.timers import SQLAlchemyAttemptMarkers, SQLAlchemyTimerStore
from xsm_celery.sqlalchemy.urls import open_dead_letter_store

__all__ = [
    "LEASE_COLUMNS",
    "SQLAlchemyAttemptMarkers",
    "SQLAlchemyDatabase",
    "SQLAlchemyDeadLetterStore",
    "SQLAlchemyIdempotencyStore",
    "SQLAlchemyInbox",
    "SQLAlchemyOutboxStore",
    "SQLAlchemyStore",
    "SQLAlchemyTimerStore",
    "make_engine",
    "open_dead_letter_store",
]
