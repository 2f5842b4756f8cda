"""``SQLAlchemyStore``: machine snapshots in any SQL database, with a shared transaction.

The store's ``lock(key)`` is a database transaction (plus a per-key lock: a PostgreSQL
advisory lock, SQLite's write lock), and every write made on the same thread while it is
open goes through the same connection (``SQLAlchemyDatabase``): ``SQLAlchemyOutboxStore(store)``
and ``SQLAlchemyInbox(store)`` rows therefore commit or roll back with the snapshot they
describe. ``workflow_family()`` opens all of them over the store for a workflow.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.errors import ConflictError
from xsm_celery.persistence.family import WorkflowStores
from xsm_celery.persistence.memory import DEFAULT_MAX_SNAPSHOT_BYTES, check_key, check_snapshot
from xsm_celery.persistence.protocols import StoredSnapshot
from xsm_celery.sqlalchemy.connect import safe_url
from xsm_celery.sqlalchemy.database import SQLAlchemyDatabase, database_of, upsert_insert
from xsm_celery.sqlalchemy.inbox import SQLAlchemyInbox
from xsm_celery.sqlalchemy.journal import SQLAlchemyWorkflowJournal
from xsm_celery.sqlalchemy.outbox import SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.tables import SNAPSHOT_TABLE
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore
from xsm_celery.sqlalchemy.workflow_session import postgres_session

__all__ = [
    "SNAPSHOT_TABLE",
    "SQLAlchemyDatabase",
    "SQLAlchemyStore",
    "database_of",
    "upsert_insert",
]

_metadata = sa.MetaData()
snapshot_table = sa.Table(
    SNAPSHOT_TABLE,
    _metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("snapshot", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("machine_version", sa.String(255), nullable=False, default=""),
    sa.Column("updated_at", sa.Float, nullable=False),
)


def advisory_key(key: str) -> int:
    """A signed 64-bit number for ``key``, stable across processes (PostgreSQL lock id)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class SQLAlchemyStore:
    """A ``StateStore`` over SQLAlchemy: SQLite and PostgreSQL are tested.

    Args:
        engine: An ``Engine``, a URL, or a ``SQLAlchemyDatabase`` to share.
        max_bytes: Largest snapshot accepted, in UTF-8 bytes.
        create_table: Create the snapshot table when it is missing (off when a
            migration owns the schema).
    """

    def __init__(
        self,
        engine: Engine | str | URL | SQLAlchemyDatabase,
        *,
        max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        create_table: bool = True,
    ) -> None:
        self.db = engine if isinstance(engine, SQLAlchemyDatabase) else SQLAlchemyDatabase(engine)
        self.max_bytes = int(max_bytes)
        if create_table:
            self.db.create(snapshot_table)

    @property
    def engine(self) -> Engine:
        """The engine every store sharing this one writes through."""
        return self.db.engine

    def load(self, key: str) -> StoredSnapshot | None:
        """Return the record of ``key``, or ``None``."""
        t = snapshot_table
        query = sa.select(t.c.snapshot, t.c.version, t.c.machine_version, t.c.updated_at).where(
            t.c.key == check_key(key)
        )
        with self.db.reading() as conn, self.db.guard("load"):
            row = conn.execute(query).first()
        if row is None:
            return None
        return StoredSnapshot(key, row[0], int(row[1]), row[2] or "", float(row[3]))

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot``; with ``expected_version`` only over that version.

        Raises:
            ConflictError: the stored version is not ``expected_version``.
        """
        check_key(key)
        check_snapshot(key, snapshot, self.max_bytes)
        values = {"snapshot": snapshot, "machine_version": machine_version or ""}
        with self.db.transaction() as conn, self.db.guard("save"):
            if expected_version:
                # The common case in one round trip: the version is the one expected.
                moved = conn.execute(
                    snapshot_table.update()
                    .where(
                        snapshot_table.c.key == key, snapshot_table.c.version == expected_version
                    )
                    .values(**values, version=expected_version + 1, updated_at=time.time())
                ).rowcount
                if moved == 1:
                    return expected_version + 1
            current = self._current_version(conn, key)
            if expected_version is not None and current != expected_version:
                raise _conflict(key, current, expected_version)
            now = time.time()
            if current:
                conn.execute(
                    snapshot_table.update()
                    .where(snapshot_table.c.key == key)
                    .values(**values, version=current + 1, updated_at=now)
                )
            else:
                self._insert_first(conn, key, values, now)
        return current + 1

    def _insert_first(self, conn: Connection, key: str, values: dict[str, Any], now: float) -> None:
        """Insert version 1; a concurrent first save of the same key is a conflict."""
        try:
            with conn.begin_nested():
                conn.execute(
                    snapshot_table.insert().values(key=key, version=1, updated_at=now, **values)
                )
        except sa.exc.IntegrityError as exc:
            raise ConflictError(
                f"snapshot {key!r} was created by another writer meanwhile; reload and retry"
            ) from exc

    def _current_version(self, conn: Connection, key: str) -> int:
        query = sa.select(snapshot_table.c.version).where(snapshot_table.c.key == key)
        if self.db.dialect != "sqlite":
            query = query.with_for_update()
        found = conn.execute(query).scalar()
        return int(found or 0)

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""
        statement = snapshot_table.delete().where(snapshot_table.c.key == check_key(key))
        with self.db.transaction() as conn, self.db.guard("delete"):
            return conn.execute(statement).rowcount > 0

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Return up to ``limit`` keys starting with ``prefix``, sorted."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = (
            sa.select(snapshot_table.c.key)
            .where(snapshot_table.c.key.like(escaped + "%", escape="\\"))
            .order_by(snapshot_table.c.key)
            .limit(max(int(limit), 0))
        )
        with self.db.reading() as conn, self.db.guard("list_keys"):
            return [row[0] for row in conn.execute(query)]

    @contextlib.contextmanager
    def lock(self, key: str, *, timeout: float = 10.0) -> Iterator[Connection]:
        """Hold ``key`` exclusively inside a transaction; a failing block rolls it back.

        PostgreSQL takes a transaction-scoped advisory lock on the key (other keys stay
        free); SQLite's ``BEGIN IMMEDIATE`` holds the whole database's write lock.

        Raises:
            LockTimeoutError: the lock was not acquired within ``timeout`` seconds.
        """
        check_key(key)
        with self.db.transaction(timeout=timeout) as conn:
            if self.db.dialect == "postgresql":
                with self.db.guard(f"locking {key!r}"):
                    # One round trip: set_config(..., true) is SET LOCAL, evaluated first.
                    conn.execute(
                        sa.text(
                            "SELECT set_config('lock_timeout', :t, true), pg_advisory_xact_lock(:k)"
                        ),
                        {"t": f"{max(int(timeout * 1000), 1)}ms", "k": advisory_key(key)},
                    )
            yield conn

    def transaction(self) -> contextlib.AbstractContextManager[Connection]:
        """Open a transaction (a savepoint inside ``lock``) for a save and its rows."""
        return self.db.transaction()

    def close(self) -> None:
        """Release the engine's pooled connections."""
        self.db.engine.dispose()

    def workflow_family(self) -> WorkflowStores:
        """The inbox, timers, outbox and transition log over this store's database.

        Their rows join the transaction of ``lock``; on PostgreSQL a step's transaction is
        the fewer-round-trip ``postgres_session``.
        """
        postgres = self.db.dialect == "postgresql"
        return WorkflowStores(
            snapshots=self,
            inbox=SQLAlchemyInbox(self),
            timers=SQLAlchemyTimerStore(self.db),
            outbox=SQLAlchemyOutboxStore(self),
            journal=SQLAlchemyWorkflowJournal(self),
            description=safe_url(self.engine),
            flat=self.db.flat,
            session=partial(postgres_session, self, log=True) if postgres else None,
        )


def _conflict(key: str, current: int, expected: int) -> ConflictError:
    return ConflictError(
        f"snapshot {key!r} is at version {current}, expected {expected}; another writer "
        "saved first: reload and retry"
    )
