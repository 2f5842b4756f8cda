"""Database errors turned into the library's ``StoreError`` family.

A table that does not exist is told apart from every other database error: it is not an
outage to wait out nor a busy key to retry, but a project whose ``migrate`` never ran for this
app (or ran on another database alias), and the fix is one command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, OperationalError

from xsm_celery.errors import ConfigurationError, StoreError, StoreUnavailableError

__all__ = ["StoreNotMigratedError", "is_missing_table", "not_migrated", "store_errors"]

#: SQLSTATE of PostgreSQL's "relation ... does not exist".
_UNDEFINED_TABLE = "42P01"


class StoreNotMigratedError(ConfigurationError, StoreError):
    """Raised when a Django store's table does not exist: the app's migrations never ran.

    A ``ConfigurationError`` since the fix is the project's set-up, not a retry; also a
    ``StoreError`` so a worker step that meets it is counted and dead-lettered like any
    other store refusal, rather than lost.
    """


@contextmanager
def store_errors(operation: str, using: str) -> Iterator[None]:
    """Re-raise a Django database error as ``StoreError`` naming the operation and alias.

    Callers of a store catch ``StoreError`` whatever the backend, so a worker can tell
    "the store is down" from a bug in its own code. A missing table becomes
    ``StoreNotMigratedError`` (SQLite reports it as an ``OperationalError``, which would
    otherwise read as an outage and be retried forever).
    """
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        if is_missing_table(exc):
            raise not_migrated(operation, using, exc) from exc
        raise StoreUnavailableError(
            f"Django store on database {using!r}: {operation} failed: {_first_line(exc)}; "
            "check that the database is reachable and migrated (manage.py migrate xsm_celery)"
        ) from exc
    except DatabaseError as exc:
        if is_missing_table(exc):
            raise not_migrated(operation, using, exc) from exc
        raise StoreError(
            f"Django store on database {using!r}: {operation} failed: {_first_line(exc)}; "
            "check that the xsm_celery migrations are applied (manage.py migrate xsm_celery)"
        ) from exc


def is_missing_table(exc: BaseException) -> bool:
    """Whether a database error says a table does not exist (SQLite, PostgreSQL, MySQL)."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == _UNDEFINED_TABLE:
        return True
    text = str(exc).lower()
    return (
        "no such table" in text
        or ("relation" in text and "does not exist" in text)
        or ("table" in text and "doesn't exist" in text)
    )


def not_migrated(operation: str, using: str, exc: BaseException) -> StoreNotMigratedError:
    """The error of a store whose table is missing, naming the command that creates it."""
    return StoreNotMigratedError(
        f"Django store on database {using!r}: {operation} failed because the xsm_celery tables "
        f"do not exist ({_first_line(exc)}); run `python manage.py migrate` (or `python "
        f"manage.py migrate xsm_celery --database={using}`) and start the process again"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
