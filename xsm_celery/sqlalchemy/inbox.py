"""``SQLAlchemyInbox``: processed idempotency keys in the snapshot store's database.

Built over a ``SQLAlchemyStore`` it writes through the transaction the store's ``lock``
opened, so a receipt commits with the snapshot of the step it describes: a crash can leave
neither a processed event without its receipt nor a receipt for a step that rolled back.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.persistence.inbox import expiry_time
from xsm_celery.persistence.protocols import InboxEntry
from xsm_celery.sqlalchemy.database import (
    DatabaseOwner,
    SQLAlchemyDatabase,
    database_of,
    upsert_insert,
)

__all__ = ["INBOX_TABLE", "SQLAlchemyInbox"]

#: Name of the inbox table (the same shape as ``SQLiteInbox``'s).
INBOX_TABLE = "xsm_inbox"

_metadata = sa.MetaData()
inbox_table = sa.Table(
    INBOX_TABLE,
    _metadata,
    sa.Column("scope", sa.String(255), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    sa.Column("receipt", sa.Text, nullable=True),
    sa.Column("expires_at", sa.Float, nullable=True, index=True),
)


class SQLAlchemyInbox:
    """An ``Inbox`` over SQLAlchemy (SQLite and PostgreSQL tested).

    Args:
        store: A ``SQLAlchemyStore`` to share transactions with, a ``SQLAlchemyDatabase``,
            an ``Engine`` or a URL.
        clock: Epoch-seconds clock for expiry (tests inject one).
        create_table: Create the table when it is missing.
    """

    def __init__(
        self,
        store: DatabaseOwner | SQLAlchemyDatabase | Engine | str | URL,
        *,
        clock: Any = time.time,
        create_table: bool = True,
    ) -> None:
        self.db = database_of(store)
        self._clock = clock
        self._insert = upsert_insert(self.db)
        if create_table:
            self.db.create(inbox_table)

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """Return the live entry for ``(scope, key)``, or ``None`` if unseen or expired."""
        t = inbox_table
        query = sa.select(t.c.fingerprint, t.c.receipt, t.c.expires_at).where(
            t.c.scope == scope, t.c.key == key, _alive(self._clock())
        )
        with self.db.reading() as conn, self.db.guard("inbox get"):
            row = conn.execute(query).first()
        return None if row is None else InboxEntry(row[0], row[1], row[2])

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Record ``(scope, key)`` in flight unless a live entry exists; return whether it won."""
        t = inbox_table
        now = self._clock()
        row = {
            "scope": scope,
            "key": key,
            "fingerprint": fingerprint,
            "receipt": None,
            "expires_at": expiry_time(ttl_s, now),
        }
        with self.db.transaction() as conn, self.db.guard("inbox claim"):
            conn.execute(
                t.delete().where(t.c.scope == scope, t.c.key == key, t.c.expires_at <= now)
            )
            return self._insert_new(conn, row)

    def _insert_new(self, conn: Connection, row: dict[str, Any]) -> bool:
        if self._insert is not None:
            statement = (
                self._insert(inbox_table)
                .values(**row)
                .on_conflict_do_nothing()
                .returning(inbox_table.c.key)
            )
            return conn.execute(statement).first() is not None
        try:
            with conn.begin_nested():
                conn.execute(inbox_table.insert().values(**row))
        except sa.exc.IntegrityError:
            return False
        return True

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of ``(scope, key)``; the first fingerprint is kept."""
        t = inbox_table
        expires = expiry_time(ttl_s, self._clock())
        if self._insert is not None:
            row = {
                "scope": scope,
                "key": key,
                "fingerprint": "",
                "receipt": receipt,
                "expires_at": expires,
            }
            upsert = (
                self._insert(t)
                .values(**row)
                .on_conflict_do_update(
                    index_elements=[t.c.scope, t.c.key],
                    set_={"receipt": receipt, "expires_at": expires},
                )
            )
            with self.db.transaction() as conn, self.db.guard("inbox mark"):
                conn.execute(upsert)
            return
        with self.db.transaction() as conn, self.db.guard("inbox mark"):
            changed = conn.execute(
                t.update()
                .where(t.c.scope == scope, t.c.key == key)
                .values(receipt=receipt, expires_at=expires)
            ).rowcount
            if not changed:
                row = {"scope": scope, "key": key, "fingerprint": "", "receipt": receipt}
                conn.execute(t.insert().values(**row, expires_at=expires))

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim so a redelivery can claim again; a receipt is kept."""
        t = inbox_table
        with self.db.transaction() as conn, self.db.guard("inbox release"):
            conn.execute(
                t.delete().where(t.c.scope == scope, t.c.key == key, t.c.receipt.is_(None))
            )

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired entries; return how many."""
        when = self._clock() if now is None else now
        statement = inbox_table.delete().where(inbox_table.c.expires_at <= when)
        with self.db.transaction() as conn, self.db.guard("inbox purge"):
            return int(conn.execute(statement).rowcount)

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many."""
        statement = inbox_table.delete().where(inbox_table.c.scope == scope)
        with self.db.transaction() as conn, self.db.guard("inbox forget"):
            return int(conn.execute(statement).rowcount)


def _alive(now: float) -> sa.ColumnElement[bool]:
    t = inbox_table
    return sa.or_(t.c.expires_at.is_(None), t.c.expires_at > now)
