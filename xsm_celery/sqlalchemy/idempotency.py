"""``SQLAlchemyIdempotencyStore``: ``@idempotent`` keys in SQLite or PostgreSQL.

One row per key (``status`` ``claimed`` or ``done``, the claim's ``token``, the stored
``result``, ``expires_at`` in epoch seconds). ``claim`` runs in one transaction: drop the
key's row if it expired, insert a fresh claim unless a row exists (``ON CONFLICT DO
NOTHING``), and read the row that won. ``complete`` and ``release`` are single
``UPDATE`` / ``DELETE`` statements guarded by the token, so a holder whose claim expired
and was taken over changes nothing. Built over a ``SQLAlchemyStore`` it writes inside the
transaction that store has open, so a result can commit with the work it describes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.patterns.idempotency import Claim, check_ttl
from xsm_celery.sqlalchemy.database import (
    DatabaseOwner,
    SQLAlchemyDatabase,
    database_of,
    upsert_insert,
)

__all__ = ["IDEMPOTENCY_TABLE", "SQLAlchemyIdempotencyStore"]

#: Name of the idempotency table.
IDEMPOTENCY_TABLE = "xsm_idempotency"

_metadata = sa.MetaData()
idempotency_table = sa.Table(
    IDEMPOTENCY_TABLE,
    _metadata,
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("token", sa.String(64), nullable=True),
    sa.Column("result", sa.Text, nullable=True),
    sa.Column("expires_at", sa.Float, nullable=True, index=True),
)


class SQLAlchemyIdempotencyStore:
    """An ``IdempotencyStore`` over SQLAlchemy (SQLite and PostgreSQL tested).

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
        clock: Callable[[], float] = time.time,
        create_table: bool = True,
    ) -> None:
        self.db = database_of(store)
        self._clock = clock
        self._insert = upsert_insert(self.db)
        if create_table:
            self.db.create(idempotency_table)

    def claim(self, key: str, token: str, claim_ttl_s: float) -> Claim:
        """Claim ``key`` unless it is done or held by a live claim, in one transaction."""
        ttl = check_ttl("claim_ttl_s", claim_ttl_s, allow_none=False)
        assert ttl is not None
        t = idempotency_table
        now = self._clock()
        row = {"key": key, "status": "claimed", "token": token, "result": None}
        with self.db.transaction() as conn, self.db.guard("idempotency claim"):
            conn.execute(t.delete().where(t.c.key == key, t.c.expires_at <= now))
            if self._insert_new(conn, {**row, "expires_at": now + ttl}):
                return Claim("claimed")
            found = conn.execute(
                sa.select(t.c.status, t.c.token, t.c.result, t.c.expires_at).where(t.c.key == key)
            ).first()
            if found is None:  # deleted by an operator between the two statements
                conn.execute(t.insert().values(**row, expires_at=now + ttl))
                return Claim("claimed")
            status, holder, result, expires = found
            if status == "done":
                return Claim("done", result=result)
            if holder == token:
                conn.execute(t.update().where(t.c.key == key).values(expires_at=now + ttl))
                return Claim("claimed")
            return Claim("in_progress", retry_after_s=max(0.0, (expires or now) - now))

    def complete(self, key: str, token: str, result: str, ttl_s: float | None) -> bool:
        """Store ``result`` if ``token`` still holds a live claim."""
        ttl = check_ttl("ttl_s", ttl_s, allow_none=True)
        t = idempotency_table
        now = self._clock()
        statement = (
            t.update()
            .where(t.c.key == key, t.c.token == token, t.c.status == "claimed")
            .where(t.c.expires_at > now)
            .values(
                status="done",
                token=None,
                result=result,
                expires_at=None if ttl is None else now + ttl,
            )
        )
        with self.db.transaction() as conn, self.db.guard("idempotency complete"):
            return bool(conn.execute(statement).rowcount)

    def release(self, key: str, token: str) -> bool:
        """Drop ``token``'s claim; a stored result is kept."""
        t = idempotency_table
        statement = t.delete().where(t.c.key == key, t.c.token == token, t.c.status == "claimed")
        with self.db.transaction() as conn, self.db.guard("idempotency release"):
            return bool(conn.execute(statement).rowcount)

    def forget(self, key: str) -> bool:
        """Delete ``key``'s claim or result."""
        statement = idempotency_table.delete().where(idempotency_table.c.key == key)
        with self.db.transaction() as conn, self.db.guard("idempotency forget"):
            return bool(conn.execute(statement).rowcount)

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired claims and results; return how many (run it from Beat)."""
        when = self._clock() if now is None else now
        statement = idempotency_table.delete().where(idempotency_table.c.expires_at <= when)
        with self.db.transaction() as conn, self.db.guard("idempotency purge"):
            return int(conn.execute(statement).rowcount)

    def _insert_new(self, conn: Connection, row: dict[str, Any]) -> bool:
        if self._insert is not None:
            statement = (
                self._insert(idempotency_table)
                .values(**row)
                .on_conflict_do_nothing()
                .returning(idempotency_table.c.key)
            )
            return conn.execute(statement).first() is not None
        try:
            with conn.begin_nested():
                conn.execute(idempotency_table.insert().values(**row))
        except sa.exc.IntegrityError:
            return False
        return True
