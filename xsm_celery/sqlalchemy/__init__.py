"""SQLAlchemy stores: dead letters (and their audit trail) in SQLite or PostgreSQL.

Needs the ``sqlalchemy`` extra; PostgreSQL URLs also need ``psycopg``.
"""

from __future__ import annotations

from xsm_celery.errors import MissingExtraError

try:
    import sqlalchemy  # noqa: F401
except ImportError as exc:
    raise MissingExtraError(extra="sqlalchemy", module="sqlalchemy") from exc

from xsm_celery.sqlalchemy.connect import make_engine
from xsm_celery.sqlalchemy.dead_letters import SQLAlchemyDeadLetterStore
from xsm_celery.sqlalchemy.inbox import SQLAlchemyInbox
from xsm_celery.sqlalchemy.outbox import LEASE_COLUMNS, SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyDatabase, SQLAlchemyStore
from xsm_celery.sqlalchemy.urls import open_dead_letter_store

__all__ = [
    "LEASE_COLUMNS",
    "SQLAlchemyDatabase",
    "SQLAlchemyDeadLetterStore",
    "SQLAlchemyInbox",
    "SQLAlchemyOutboxStore",
    "SQLAlchemyStore",
    "make_engine",
    "open_dead_letter_store",
]
