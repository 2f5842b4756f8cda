"""Durable timers and attempt markers in a SQL database (SQLite or PostgreSQL).

A retry delay longer than the broker can hold as a countdown becomes a row here; Beat's
timer task claims the due rows, publishes them and deletes them, so a delay survives a
restart of Beat, of the workers, or of the whole host. Claims are leases taken with a
conditional ``UPDATE``, which is atomic on every database, so two Beat processes (one left
running by mistake during a deploy) never publish the same timer twice at once.

The same database keeps attempt markers for chart tasks when neither the broker nor the
result backend is a key-value store: one row per task id, overwritten by each attempt.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.errors import ConfigurationError, StoreError, StoreUnavailableError
from xsm_celery.ids import new_id
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S, DueTimer
from xsm_celery.sqlalchemy.connect import make_engine, safe_url
from xsm_celery.sqlalchemy.database import SQLAlchemyDatabase
from xsm_celery.sqlalchemy.outages import is_outage

__all__ = [
    "MARKER_TABLE",
    "TIMER_TABLE",
    "SQLAlchemyAttemptMarkers",
    "SQLAlchemyTimerStore",
    "engine_for",
]

#: Name of the table holding durable timers.
TIMER_TABLE = "xsm_timers"

#: Name of the table holding attempt markers.
MARKER_TABLE = "xsm_attempt_markers"

_metadata = sa.MetaData()

_timers = sa.Table(
    TIMER_TABLE,
    _metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(255), nullable=False, index=True),
    sa.Column("due_at", sa.Float, nullable=False, index=True),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("owner", sa.String(255), nullable=True),
    sa.Column("lease_until", sa.Float, nullable=True),
)

_markers = sa.Table(
    MARKER_TABLE,
    _metadata,
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False, index=True),
)

_engines: dict[str, Engine] = {}


def engine_for(url: str | URL | Engine) -> Engine:
    """One engine per URL in this process, so timers and markers share a pool and a file."""
    if isinstance(url, Engine):
        return url
    text = str(url)
    engine = _engines.get(text)
    if engine is None:
        engine = _engines[text] = make_engine(url)
    return engine


@contextmanager
def _guard(engine: Engine, what: str) -> Iterator[None]:
    """Turn a driver failure into the package's ``StoreError`` family."""
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        if is_outage(exc):
            raise StoreUnavailableError(
                f"timer store {safe_url(engine)!r} is unreachable during {what}: "
                f"{getattr(exc, 'orig', None) or exc}"
            ) from exc
        raise StoreError(f"timer store {safe_url(engine)!r} failed during {what}: {exc}") from exc


def _create(engine: Engine, table: sa.Table) -> None:
    """Create ``table`` if missing; losing the race to another process is not an error.

    A worker and Beat (or two workers) often open the same fresh database at once: both see
    no table and both issue ``CREATE TABLE``, and one of them fails although all is well.
    """
    with _guard(engine, "open"):
        try:
            _metadata.create_all(engine, tables=[table], checkfirst=True)
        except sa.exc.SQLAlchemyError:
            if not sa.inspect(engine).has_table(table.name):
                raise


def _finite(name: str, value: float) -> float:
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ConfigurationError(f"{name} must be finite epoch seconds, got {value!r}")
    return number


class SQLAlchemyTimerStore:
    """A ``TimerStore`` over a SQLAlchemy engine (tables created on first use).

    Args:
        engine: An ``Engine``, a URL (a SQLite file is created mode 0600), or the
            ``SQLAlchemyDatabase`` of a ``SQLAlchemyStore``: then ``schedule`` and the
            deletes write through the transaction the store's ``lock`` opened, so timer
            rows commit or roll back with the snapshot that armed them.
        wall: The epoch-seconds clock used for lease expiry checks.
    """

    def __init__(
        self,
        engine: Engine | str | URL | SQLAlchemyDatabase,
        *,
        wall: Callable[[], float] = time.time,
    ):
        if isinstance(engine, SQLAlchemyDatabase):
            self._db: SQLAlchemyDatabase | None = engine
            self.engine = engine.engine
        else:
            self._db = None
            self.engine = engine_for(engine)
        self._wall = wall
        _create(self.engine, _timers)

    def shares_transaction_with(self, store: Any) -> bool:
        """Whether rows written here join ``store``'s transactions (same database object)."""
        return self._db is not None and getattr(store, "db", None) is self._db

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """The shared transaction's connection when one is open, else a fresh transaction."""
        current = self._db.current if self._db is not None else None
        if current is not None:
            yield current
            return
        with self.engine.begin() as conn:
            yield conn

    def schedule(self, key: str, due_at_wall: float, payload: dict[str, Any]) -> str:
        """Store a timer for ``key`` due at ``due_at_wall`` (epoch s); return its id."""
        timer_id = new_id()
        row = {"id": timer_id, "key": key, "due_at": _finite("due_at_wall", due_at_wall)}
        with _guard(self.engine, "schedule"), self._writing() as conn:
            conn.execute(_timers.insert().values(**row, payload=payload))
        return timer_id

    def due(self, now: float, limit: int = 100) -> list[DueTimer]:
        """Up to ``limit`` timers due at ``now`` or earlier, earliest first, leased or not."""
        query = (
            sa.select(_timers.c.id, _timers.c.key, _timers.c.due_at, _timers.c.payload)
            .where(_timers.c.due_at <= _finite("now", now))
            .order_by(_timers.c.due_at, _timers.c.id)
            .limit(_limit(limit))
        )
        with _guard(self.engine, "due"), self.engine.connect() as conn:
            return [DueTimer(*row) for row in conn.execute(query)]

    def claim(
        self, now: float, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[DueTimer]:
        """Lease up to ``limit`` due timers to ``owner`` for ``lease_s`` seconds.

        Rows under another owner's live lease are skipped; rows already leased to ``owner``
        are returned again, so a restarted Beat picks its own rows straight back up.
        """
        now = _finite("now", now)
        free = sa.or_(
            _timers.c.lease_until.is_(None),
            _timers.c.lease_until < now,
            _timers.c.owner == owner,
        )
        candidates = (
            sa.select(_timers.c.id, _timers.c.key, _timers.c.due_at, _timers.c.payload)
            .where(_timers.c.due_at <= now, free)
            .order_by(_timers.c.due_at, _timers.c.id)
            .limit(_limit(limit))
        )
        taken: list[DueTimer] = []
        with _guard(self.engine, "claim"), self.engine.begin() as conn:
            for row in conn.execute(candidates).all():
                won = conn.execute(
                    _timers.update()
                    .where(_timers.c.id == row.id, free)
                    .values(owner=owner, lease_until=now + float(lease_s))
                )
                if won.rowcount == 1:
                    taken.append(DueTimer(*row))
        return taken

    def release(self, ids: Sequence[str], owner: str) -> int:
        """Hand back ``owner``'s leases on ``ids``; return how many were released."""
        if not ids:
            return 0
        query = (
            _timers.update()
            .where(_timers.c.id.in_(list(ids)), _timers.c.owner == owner)
            .values(owner=None, lease_until=None)
        )
        with _guard(self.engine, "release"), self.engine.begin() as conn:
            return int(conn.execute(query).rowcount)

    def delete(self, timer_id: str) -> bool:
        """Remove one timer; return whether it existed."""
        with _guard(self.engine, "delete"), self._writing() as conn:
            return bool(conn.execute(_timers.delete().where(_timers.c.id == timer_id)).rowcount)

    def postpone(self, timer_id: str, due_at_wall: float) -> bool:
        """Move one timer to ``due_at_wall`` and free its lease; return whether it exists."""
        query = (
            _timers.update()
            .where(_timers.c.id == timer_id)
            .values(due_at=_finite("due_at_wall", due_at_wall), owner=None, lease_until=None)
        )
        with _guard(self.engine, "postpone"), self._writing() as conn:
            return bool(conn.execute(query).rowcount)

    def delete_key(self, key: str) -> int:
        """Remove every timer of ``key``; return how many."""
        with _guard(self.engine, "delete_key"), self._writing() as conn:
            return int(conn.execute(_timers.delete().where(_timers.c.key == key)).rowcount)

    def count(self) -> int:
        """How many timers are stored, due or not."""
        with _guard(self.engine, "count"), self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(_timers)).scalar_one())

    def earliest_due_at(self) -> float | None:
        """The due time of the earliest stored timer (epoch s), or None when there is none."""
        with _guard(self.engine, "earliest_due_at"), self.engine.connect() as conn:
            value = conn.execute(sa.select(sa.func.min(_timers.c.due_at))).scalar()
        return None if value is None else float(value)


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
    return limit


class SQLAlchemyAttemptMarkers:
    """Attempt markers (``task id -> attempt started``) as rows that expire.

    Args:
        engine: An ``Engine`` or a URL; shares the timer store's engine for the same URL.
        ttl_s: Seconds a marker is kept; ``purge_expired`` deletes older ones.
        wall: The epoch-seconds clock.
    """

    def __init__(
        self, engine: Engine | str | URL, ttl_s: float, *, wall: Callable[[], float] = time.time
    ) -> None:
        self.engine = engine_for(engine)
        self._ttl = float(ttl_s)
        self._wall = wall
        _create(self.engine, _markers)

    @classmethod
    def from_url(cls, url: str, ttl_s: float) -> SQLAlchemyAttemptMarkers:
        """Open the markers table in the database at ``url``."""
        return cls(url, ttl_s)

    def mark(self, task_id: str, attempt: int) -> None:
        """Record that ``attempt`` of ``task_id`` started (overwrites the previous one)."""
        expires = self._wall() + self._ttl
        with _guard(self.engine, "mark"), self.engine.begin() as conn:
            changed = conn.execute(
                _markers.update()
                .where(_markers.c.task_id == task_id)
                .values(attempt=attempt, expires_at=expires)
            ).rowcount
            if not changed:
                conn.execute(
                    _markers.insert().values(task_id=task_id, attempt=attempt, expires_at=expires)
                )

    def started(self, task_id: str) -> int | None:
        """The attempt recorded for ``task_id``, unless it expired."""
        query = sa.select(_markers.c.attempt).where(
            _markers.c.task_id == task_id, _markers.c.expires_at >= self._wall()
        )
        with _guard(self.engine, "started"), self.engine.connect() as conn:
            value = conn.execute(query).scalar_one_or_none()
        return None if value is None else int(value)

    def purge_expired(self) -> int:
        """Delete expired markers; return how many."""
        query = _markers.delete().where(_markers.c.expires_at < self._wall())
        with _guard(self.engine, "purge_expired"), self.engine.begin() as conn:
            return int(conn.execute(query).rowcount)
