"""Database errors turned into the library's ``StoreError`` family."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, OperationalError

from xsm_celery.errors import StoreError, StoreUnavailableError

__all__ = ["store_errors"]


@contextmanager
def store_errors(operation: str, using: str) -> Iterator[None]:
    """Re-raise a Django database error as ``StoreError`` naming the operation and alias.

    Callers of a store catch ``StoreError`` whatever the backend, so a worker can tell
    "the store is down" from a bug in its own code.
    """
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        raise StoreUnavailableError(
            f"Django store on database {using!r}: {operation} failed: {_first_line(exc)}; "
            "check that the database is reachable and migrated (manage.py migrate xsm_celery)"
        ) from exc
    except DatabaseError as exc:
        raise StoreError(
            f"Django store on database {using!r}: {operation} failed: {_first_line(exc)}; "
            "check that the xsm_celery migrations are applied (manage.py migrate xsm_celery)"
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
