"""Which SQLAlchemy errors mean "the database is down" rather than "it refused the value".

Every SQLAlchemy store turns a driver error into ``StoreUnavailableError`` (an outage: the
caller retries later without counting it against the work) or plain ``StoreError`` (a
refusal: a value too long for a column, a constraint, a missing table; retrying the same
value fails the same way, so the caller counts it and gives up). Keeping the split in one
place is what stops a refusal from being requeued for ever as if it were an outage.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["is_outage"]

#: Errors raised when the server cannot be reached, the connection dropped, the pool ran dry,
#: or the server aborted the statement for reasons of its own (lock or serialization timeout).
_OUTAGE_TYPES: tuple[type[BaseException], ...] = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    sa.exc.DisconnectionError,
    sa.exc.TimeoutError,
)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unreachable (retry later) rather than refusing."""
    if isinstance(exc, _OUTAGE_TYPES):
        return True
    if type(exc) is sa.exc.DatabaseError:
        # The bare class, not a refusal subclass (DataError, IntegrityError, ...): the
        # driver could not use the database at all (SQLite: "file is not a database").
        return True
    return bool(getattr(exc, "connection_invalidated", False))
