"""``SQLAlchemyOutboxStore``: outbox rows in the snapshot store's database and transaction.

Built over a ``SQLAlchemyStore``, ``add`` writes through the transaction its ``lock(key)``
opened, so the rows commit or roll back with the snapshot they announce. Several relays
drain one outbox with row leases: ``claim`` marks up to ``limit`` unsent rows with an owner
and an expiry in one transaction (on PostgreSQL the candidates are locked with ``FOR UPDATE
SKIP LOCKED``, so two relays claiming at the same moment get disjoint rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.eda import Envelope
from xsm_celery.eda.outbox_protocols import FailedOutboxRecord, OutboxRecord
from xsm_celery.eda.outbox_store import check_limit, check_refusal, failed_record
from xsm_celery.errors import ArgumentTypeError, ConfigurationError, StoreError
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S
from xsm_celery.sqlalchemy.database import DatabaseOwner, SQLAlchemyDatabase, database_of

__all__ = ["ADDED_COLUMNS", "LEASE_COLUMNS", "OUTBOX_TABLE", "SQLAlchemyOutboxStore"]

#: Name of the outbox table (the same shape as ``SQLiteOutboxStore``'s).
OUTBOX_TABLE = "xsm_outbox"
#: The columns relay leases need; a table made before leases existed gains them on open.
LEASE_COLUMNS = (("claimed_by", "VARCHAR(128)"), ("claimed_until", "FLOAT"))
#: Every column added after the first release (leases, then refusal counting), with the
#: DDL type a table made before them gains on open.
ADDED_COLUMNS = (
    *LEASE_COLUMNS,
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT"),
    ("failed_at", "FLOAT"),
)
_MAX_OWNER = 128
_CHUNK = 500

_metadata = sa.MetaData()
outbox_table = sa.Table(
    OUTBOX_TABLE,
    _metadata,
    sa.Column("seq", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("id", sa.String(64), nullable=False),
    sa.Column("topic", sa.String(255), nullable=False),
    sa.Column("subject", sa.String(255), nullable=True),
    sa.Column("envelope", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("sent_at", sa.Float, nullable=True),
    sa.Column("claimed_by", sa.String(_MAX_OWNER), nullable=True),
    sa.Column("claimed_until", sa.Float, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("failed_at", sa.Float, nullable=True),
    sa.Index(
        "xsm_outbox_unsent",
        "seq",
        sqlite_where=sa.text("sent_at IS NULL"),
        postgresql_where=sa.text("sent_at IS NULL"),
    ),
)


def _check_claim(limit: int, owner: str, lease_s: float) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
    if not isinstance(owner, str) or not owner or len(owner) > _MAX_OWNER:
        raise ConfigurationError(
            f"owner must be a non-empty string of at most {_MAX_OWNER} characters: {owner!r}"
        )
    if not lease_s > 0:
        raise ConfigurationError(f"lease_s must be > 0 seconds, got {lease_s!r}")


class SQLAlchemyOutboxStore:
    """An ``OutboxStore`` with relay leases over SQLAlchemy (SQLite and PostgreSQL tested).

    Args:
        store: A ``SQLAlchemyStore`` to share transactions with, a ``SQLAlchemyDatabase``,
            an ``Engine`` or a URL.
        clock: Epoch-seconds clock for leases and ``purge_sent`` (tests inject one).
        create_table: Create the table, or add the lease and refusal columns to an older
            one. With False a table without them is refused at once, naming the migration
            to write.
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
        if create_table:
            self.db.create(outbox_table)
        self._check_added_columns(add=create_table)

    def _check_added_columns(self, *, add: bool) -> None:
        with self.db.guard("inspecting xsm_outbox"):
            present = {c["name"] for c in sa.inspect(self.db.engine).get_columns(OUTBOX_TABLE)}
        missing = [(name, kind) for name, kind in ADDED_COLUMNS if name not in present]
        if not missing:
            return
        if not add:
            names = ", ".join(name for name, _ in missing)
            ddl = ", ".join(f"{name} {kind}" for name, kind in missing)
            raise StoreError(
                f"{OUTBOX_TABLE} lacks {names}; add a migration creating {ddl} (NULL unless "
                "said), or open the store with create_table=True"
            )
        with self.db.transaction() as conn, self.db.guard("adding outbox columns"):
            for name, kind in missing:
                conn.exec_driver_sql(f"ALTER TABLE {OUTBOX_TABLE} ADD COLUMN {name} {kind}")

    def add(self, topic: str, envelope: Envelope) -> int:
        """Append a row (in the current transaction, if any) and return its sequence number."""
        if not isinstance(envelope, Envelope):
            raise ArgumentTypeError(f"add() needs an Envelope, got {type(envelope).__name__}")
        with self.db.transaction() as conn, self.db.guard("add"):
            result = conn.execute(outbox_table.insert().values(**self._row(topic, envelope)))
            seq = result.inserted_primary_key
        if not seq or seq[0] is None:
            raise StoreError("the database did not return the new outbox row's sequence number")
        return int(seq[0])

    def add_many(self, rows: Iterable[tuple[str, Envelope]]) -> None:
        """Append several rows in one transaction (one round trip per chunk)."""
        values = [self._row(topic, env) for topic, env in rows]
        if not values:
            return
        with self.db.transaction() as conn, self.db.guard("add_many"):
            for start in range(0, len(values), _CHUNK):
                conn.execute(outbox_table.insert(), values[start : start + _CHUNK])

    def _row(self, topic: str, envelope: Envelope) -> dict[str, Any]:
        return {
            "id": envelope.id,
            "topic": topic,
            "subject": envelope.subject,
            "envelope": envelope.to_json(),
            "created_at": self._clock(),
        }

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        """Return up to ``limit`` unsent rows in sequence order, leased or not."""
        t = outbox_table
        query = (
            sa.select(t.c.seq, t.c.topic, t.c.envelope)
            .where(*_pending())
            .order_by(t.c.seq)
            .limit(max(int(limit), 0))
        )
        with self.db.reading() as conn, self.db.guard("pending"):
            return [_record(row) for row in conn.execute(query)]

    def claim(
        self, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[OutboxRecord]:
        """Lease up to ``limit`` unsent rows to ``owner``, skipping others' live leases.

        Rows already leased to ``owner`` come back too, so a restarted relay with a stable
        owner takes its own rows at once instead of waiting for the lease to run out.
        """
        _check_claim(limit, owner, lease_s)
        if limit == 0:
            return []
        now = self._clock()
        with self.db.transaction() as conn, self.db.guard("claim"):
            rows = conn.execute(self._claimable(now, owner, limit)).all()
            if rows:
                self._lease(conn, [row[0] for row in rows], owner, now, lease_s)
        return [_record(row) for row in rows]

    def _claimable(self, now: float, owner: str, limit: int) -> sa.Select[Any]:
        t = outbox_table
        query = (
            sa.select(t.c.seq, t.c.topic, t.c.envelope)
            .where(*_pending(), _free(now, owner))
            .order_by(t.c.seq)
            .limit(limit)
        )
        if self.db.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)
        return query

    def _lease(
        self, conn: Connection, seqs: list[int], owner: str, now: float, lease_s: float
    ) -> None:
        t = outbox_table
        for start in range(0, len(seqs), _CHUNK):
            conn.execute(
                t.update()
                .where(t.c.seq.in_(seqs[start : start + _CHUNK]), *_pending())
                .values(claimed_by=owner, claimed_until=now + lease_s)
            )

    def release(self, seqs: Iterable[int], owner: str) -> int:
        """Hand back ``owner``'s leases on ``seqs``; return how many were released."""
        t = outbox_table
        return self._update_chunks(
            list(seqs),
            lambda part: (
                t.update()
                .where(t.c.seq.in_(part), t.c.sent_at.is_(None), t.c.claimed_by == owner)
                .values(claimed_by=None, claimed_until=None)
            ),
        )

    def mark_sent(self, seqs: Iterable[int]) -> int:
        """Mark rows as published; return how many changed."""
        t = outbox_table
        now = self._clock()
        return self._update_chunks(
            list(seqs),
            lambda part: (
                t.update()
                .where(t.c.seq.in_(part), t.c.sent_at.is_(None))
                .values(sent_at=now, claimed_by=None, claimed_until=None)
            ),
        )

    def _update_chunks(self, seqs: list[int], statement: Callable[[list[int]], Any]) -> int:
        changed = 0
        if not seqs:
            return 0
        with self.db.transaction() as conn, self.db.guard("update"):
            for start in range(0, len(seqs), _CHUNK):
                changed += conn.execute(statement(seqs[start : start + _CHUNK])).rowcount
        return changed

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        t = outbox_table
        cutoff = self._clock() - older_than_s
        statement = t.delete().where(t.c.sent_at.is_not(None), t.c.sent_at <= cutoff)
        with self.db.transaction() as conn, self.db.guard("purge_sent"):
            return int(conn.execute(statement).rowcount)

    def count(self, *, pending_only: bool = False, failed_only: bool = False) -> int:
        """Return how many rows are held (only pending or only failed ones if asked)."""
        query = sa.select(sa.func.count()).select_from(outbox_table)
        if failed_only:
            query = query.where(*_failed())
        elif pending_only:
            query = query.where(*_pending())
        with self.db.reading() as conn, self.db.guard("count"):
            return int(conn.execute(query).scalar() or 0)

    def record_refusal(self, seq: int, owner: str, error: str, *, max_attempts: int) -> int:
        """Count one refusal of ``owner``'s row ``seq``; fail it at ``max_attempts``.

        One ``UPDATE`` counts, drops the lease and, at the limit, sets ``failed_at``, and
        only if the row is still ``owner``'s: two relays can never both count one refusal.
        """
        text = check_refusal(owner, error, max_attempts)
        t = outbox_table
        now = self._clock()
        counted = t.c.attempts + 1
        statement = (
            t.update()
            .where(t.c.seq == seq, t.c.claimed_by == owner, *_pending())
            .values(
                attempts=counted,
                last_error=text,
                failed_at=sa.case((counted >= max_attempts, now), else_=None),
                claimed_by=None,
                claimed_until=None,
            )
        )
        with self.db.transaction() as conn, self.db.guard("record_refusal"):
            if not conn.execute(statement).rowcount:
                return 0
            value = conn.execute(sa.select(t.c.attempts).where(t.c.seq == seq)).scalar()
        return int(value or 0)

    def failed(self, limit: int = 100) -> list[FailedOutboxRecord]:
        """Return up to ``limit`` failed rows in sequence order."""
        t = outbox_table
        query = (
            sa.select(t.c.seq, t.c.topic, t.c.envelope, t.c.attempts, t.c.last_error, t.c.failed_at)
            .where(*_failed())
            .order_by(t.c.seq)
            .limit(check_limit(limit))
        )
        with self.db.reading() as conn, self.db.guard("failed"):
            rows = conn.execute(query).all()
        return [failed_record(row) for row in rows]

    def requeue(self, seq: int) -> bool:
        """Make failed row ``seq`` pending again with its attempts reset."""
        t = outbox_table
        statement = t.update().where(t.c.seq == seq, *_failed()).values(attempts=0, failed_at=None)
        with self.db.transaction() as conn, self.db.guard("requeue"):
            return int(conn.execute(statement).rowcount) > 0

    def oldest_pending_at(self) -> float | None:
        """When the oldest pending row was added (epoch s), or None when none waits."""
        t = outbox_table
        query = sa.select(sa.func.min(t.c.created_at)).where(*_pending())
        with self.db.reading() as conn, self.db.guard("oldest_pending_at"):
            value = conn.execute(query).scalar()
        return None if value is None else float(value)


def _pending() -> tuple[sa.ColumnElement[bool], ...]:
    """Rows the relay may publish: not sent, not set aside as failed."""
    t = outbox_table
    return (t.c.sent_at.is_(None), t.c.failed_at.is_(None))


def _failed() -> tuple[sa.ColumnElement[bool], ...]:
    """Rows set aside after ``max_attempts`` refusals and not sent by hand since."""
    t = outbox_table
    return (t.c.sent_at.is_(None), t.c.failed_at.is_not(None))


def _free(now: float, owner: str) -> sa.ColumnElement[bool]:
    """Rows nobody holds: never leased, lease run out, or leased to ``owner`` already."""
    t = outbox_table
    return sa.or_(t.c.claimed_until.is_(None), t.c.claimed_until <= now, t.c.claimed_by == owner)


def _record(row: Any) -> OutboxRecord:
    """A row as a record; the envelope is the library's own validated JSON, sent as is."""
    seq, topic, text = row
    return OutboxRecord(int(seq), topic, Envelope.from_trusted_json(text))
