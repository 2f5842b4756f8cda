"""``SQLAlchemyDeadLetterStore``: dead letters and their audit trail in a SQL database.

The production store: a SQLite file for one host, PostgreSQL shared by every worker, Beat
and the operator's CLI. Records are redacted again on write, because a record may have been
built by hand or by an older writer and the table outlives both; what the table holds is
what ``xsm-celery dlq show`` prints.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS
from xsm_celery.errors import ArgumentTypeError, StoreError, StoreUnavailableError
from xsm_celery.operators import current_actor
from xsm_celery.patterns.dead_letter import DeadLetter, check_cutoff, check_limit
from xsm_celery.patterns.dead_letter.redaction import plain_json, redact_record
from xsm_celery.sqlalchemy.connect import make_engine, safe_url
from xsm_celery.sqlalchemy.outages import is_outage
from xsm_celery.sqlalchemy.tables import audit_table, dead_letter_table, metadata

__all__ = ["SQLAlchemyDeadLetterStore", "dead_letter_metadata"]

#: The ``MetaData`` holding both tables, for projects whose migrations own the schema.
dead_letter_metadata = metadata

#: Attempts at creating the tables while other processes create them too.
_CREATE_ROUNDS = 5

_T = dead_letter_table
_A = audit_table


class SQLAlchemyDeadLetterStore:
    """A ``DeadLetterStore`` over any SQLAlchemy engine (SQLite and PostgreSQL are tested).

    A store is also a sink: ``store(record)`` is ``store.put(record)``, so it can be given
    straight to a ``DeadLetterPlugin`` or a chart task.

    Args:
        engine: An ``Engine``, or a URL opened with ``make_engine`` (SQLite files are
            created mode 0600; ``postgresql://`` uses psycopg).
        create_table: Create the two tables when they are missing. With False the store
            refuses to open (``StoreError``) unless both already exist, which is what a
            reader such as the CLI wants.
        must_exist: With a SQLite URL, refuse a file that does not exist.
        redact_keys: Keys masked on write in addition to the engine's default list.
        wall: The epoch-seconds clock for ``resolved_at`` and audit times.

    Raises:
        StoreUnavailableError: the database cannot be reached or is not a database.
        StoreError: ``create_table=False`` and a table is missing.
    """

    def __init__(
        self,
        engine: Engine | str | URL,
        *,
        create_table: bool = True,
        must_exist: bool = False,
        redact_keys: Iterable[str] = (),
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(engine, Engine):
            engine = make_engine(engine, must_exist=must_exist)
        self.engine = engine
        self._extra_keys = tuple(redact_keys)
        self._wall = wall
        with self._guard("open"):
            if create_table:
                _create_tables(self.engine)
            else:
                _require_tables(self.engine)

    def __repr__(self) -> str:
        return f"SQLAlchemyDeadLetterStore({safe_url(self.engine)!r})"

    def __call__(self, record: DeadLetter) -> str:
        """Store ``record``: a store is a sink."""
        return self.put(record)

    def __len__(self) -> int:
        return self.count(include_resolved=True)

    def put(self, record: DeadLetter) -> str:
        """Store ``record`` redacted, replacing a record with the same id; return its id."""
        if not isinstance(record, DeadLetter):
            raise ArgumentTypeError(f"put() takes a DeadLetter, got {type(record).__name__}")
        row = _row(self._redact(record))
        with self._guard("put"), self.engine.begin() as conn:
            conn.execute(_T.delete().where(_T.c.id == record.id))
            conn.execute(_T.insert().values(**row))
        return record.id

    def get(self, record_id: str) -> DeadLetter | None:
        """The record with ``record_id``, or None."""
        query = sa.select(_T.c.body, _T.c.resolved_at).where(_T.c.id == record_id)
        with self._guard("get"), self.engine.connect() as conn:
            found = conn.execute(query).first()
        return None if found is None else _record(found.body, found.resolved_at)

    def list(
        self,
        limit: int = 100,
        include_resolved: bool = False,
        *,
        reason: str | None = None,
        machine_id: str | None = None,
        task_name: str | None = None,
        task_id: str | None = None,
    ) -> builtins.list[DeadLetter]:
        """Up to ``limit`` records, newest first, optionally filtered on indexed columns.

        Raises:
            ValueError: ``limit`` is negative or not an integer.
        """
        check_limit(limit)
        query = sa.select(_T.c.body, _T.c.resolved_at)
        filters = {
            "reason": reason,
            "machine_id": machine_id,
            "task_name": task_name,
            "task_id": task_id,
        }
        for name, value in filters.items():
            if value is not None:
                query = query.where(_T.c[name] == value)
        if not include_resolved:
            query = query.where(_T.c.resolved_at.is_(None))
        query = query.order_by(_T.c.taken_at.desc(), _T.c.id.desc()).limit(limit)
        return self._records(query)

    def all(self) -> builtins.list[DeadLetter]:
        """Every record, resolved or not, oldest first."""
        query = sa.select(_T.c.body, _T.c.resolved_at).order_by(_T.c.taken_at, _T.c.id)
        return self._records(query)

    def count(self, include_resolved: bool = False) -> int:
        """How many records there are (unresolved only unless asked)."""
        query = sa.select(sa.func.count()).select_from(_T)
        if not include_resolved:
            query = query.where(_T.c.resolved_at.is_(None))
        with self._guard("count"), self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def count_by_reason(self, since_wall: float) -> dict[str, int]:
        """How many records were taken at or after ``since_wall`` (epoch s), per reason."""
        query = (
            sa.select(_T.c.reason, sa.func.count())
            .where(_T.c.taken_at >= float(since_wall))
            .group_by(_T.c.reason)
        )
        with self._guard("count_by_reason"), self.engine.connect() as conn:
            return {str(reason): int(n) for reason, n in conn.execute(query)}

    def mark_resolved(self, record_id: str, resolved_at: float | None = None) -> bool:
        """Mark a record resolved; False when there is no such record."""
        when = self._wall() if resolved_at is None else check_cutoff(resolved_at)
        statement = _T.update().where(_T.c.id == record_id).values(resolved_at=when)
        with self._guard("mark_resolved"), self.engine.begin() as conn:
            return conn.execute(statement).rowcount > 0

    def delete(self, record_id: str) -> bool:
        """Remove a record; False when there is no such record. Its audit rows stay."""
        with self._guard("delete"), self.engine.begin() as conn:
            return conn.execute(_T.delete().where(_T.c.id == record_id)).rowcount > 0

    def purge_older_than(self, cutoff_wall: float) -> int:
        """Remove records taken before ``cutoff_wall`` (epoch seconds); return how many.

        Raises:
            ValueError: ``cutoff_wall`` is NaN or not a number.
        """
        cutoff = check_cutoff(cutoff_wall)
        with self._guard("purge_older_than"), self.engine.begin() as conn:
            return int(conn.execute(_T.delete().where(_T.c.taken_at < cutoff)).rowcount)

    def audit(self, record_id: str, action: str, *, actor: str, reason: str, outcome: str) -> None:
        """Append one operator action (replay, resolve, purge) to the audit table."""
        values = {
            "record_id": record_id,
            "at": self._wall(),
            "action": action,
            "actor": current_actor(actor),
            "reason": reason,
            "outcome": outcome,
        }
        with self._guard("audit"), self.engine.begin() as conn:
            conn.execute(_A.insert().values(**values))

    def audit_log(self, record_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Audit entries, oldest first; only those of ``record_id`` when given."""
        columns = [_A.c.record_id, _A.c.action, _A.c.actor, _A.c.reason, _A.c.outcome, _A.c.at]
        query = sa.select(*columns).order_by(_A.c.seq)
        if record_id is not None:
            query = query.where(_A.c.record_id == record_id)
        with self._guard("audit_log"), self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def close(self) -> None:
        """Close pooled connections; the store can still be used (it reconnects)."""
        self.engine.dispose()

    def _records(self, query: sa.Select[Any]) -> builtins.list[DeadLetter]:
        with self._guard("list"), self.engine.connect() as conn:
            return [_record(row.body, row.resolved_at) for row in conn.execute(query)]

    def _redact(self, record: DeadLetter) -> DeadLetter:
        keys = DEFAULT_REDACT_KEYS + self._extra_keys if self._extra_keys else DEFAULT_REDACT_KEYS
        return redact_record(record, keys)

    def _guard(self, operation: str) -> AbstractContextManager[None]:
        return _translate_errors(self.engine, operation)


@contextmanager
def _translate_errors(engine: Engine, operation: str) -> Iterator[None]:
    """Turn a driver error into a ``StoreError`` that names the operation and the URL."""
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        error_type = StoreUnavailableError if is_outage(exc) else StoreError
        raise error_type(
            f"dead-letter store {safe_url(engine)!r}: {operation} failed: {detail}; check "
            "the URL and that the database is reachable and is an xsm_celery dead-letter store"
        ) from exc


def _create_tables(engine: Engine) -> None:
    """Create missing tables; a concurrent creator (another worker) winning the race is fine.

    Two processes can both see a table missing and both create it; the loser gets "already
    exists" (SQLite: OperationalError, PostgreSQL: a duplicate-type IntegrityError or
    ProgrammingError), which is not a failure: the next round finds that table and creates
    any other one still missing.
    """
    for round_ in range(_CREATE_ROUNDS):
        try:
            metadata.create_all(engine, checkfirst=True)
            return
        except sa.exc.DBAPIError:
            if _tables_present(engine):
                return
            if round_ == _CREATE_ROUNDS - 1:
                raise
            time.sleep(0.05 * (round_ + 1))


def _require_tables(engine: Engine) -> None:
    missing = _missing_tables(engine)
    if missing:
        raise StoreError(
            f"{safe_url(engine)!r} has no {', '.join(missing)} table; it is not an "
            "xsm_celery dead-letter store yet (open it once with create_table=True, or run "
            "the application that writes dead letters)"
        )


def _missing_tables(engine: Engine) -> builtins.list[str]:
    present = set(sa.inspect(engine).get_table_names())
    return [name for name in (_T.name, _A.name) if name not in present]


def _tables_present(engine: Engine) -> bool:
    return not _missing_tables(engine)


def _row(record: DeadLetter) -> dict[str, Any]:
    return {
        "id": record.id,
        "taken_at": record.taken_at,
        "reason": record.reason,
        "machine_id": record.machine_id,
        "state_id": record.state_id,
        "task_name": record.task_name,
        "task_id": record.task_id,
        "topic": record.topic,
        "resolved_at": record.resolved_at,
        "body": plain_json(record.to_dict()),
    }


def _record(body: Any, resolved_at: float | None) -> DeadLetter:
    raw = json.loads(body) if isinstance(body, str | bytes) else body
    return replace(DeadLetter.from_dict(raw), resolved_at=resolved_at)
