"""Engines for the SQLAlchemy stores: SQLite files created 0600, PostgreSQL through psycopg.

Every store in this package takes an ``Engine`` or a URL; a URL goes through ``make_engine``
so that the same rules hold for dead letters, timers and the outbox: a SQLite file the store
creates is readable by its owner only (it holds redacted but still sensitive payloads), a
file that is missing can be refused instead of created (an operator's typo must not produce
an empty store that reports "no dead letters"), and a pool never crosses ``fork()``.

A pooled PostgreSQL connection is pinged before use only when it sat idle for
``PING_IDLE_S`` or more. SQLAlchemy's ``pool_pre_ping`` pings on every checkout, one more
round trip per transaction: a fifth of a workflow step. A connection back in use within a
second is almost always alive; when it is not (the server restarted in that second), the
statement fails as a disconnect, SQLAlchemy drops the pool, and the stores report a
``StoreUnavailableError``, which every caller retries uncounted. Pass ``pool_pre_ping=True``
to ``make_engine`` to ping on every checkout instead.

psycopg prepares a statement on the server once a connection has run it
``prepare_threshold`` times (5). Behind PgBouncer in transaction pooling mode (before 1.21,
or without ``max_prepared_statements``) the next transaction may run on another server
session, where the statement is missing or its name already taken. A URL ending in
``?prepare_threshold=none`` turns preparation off (an integer sets the threshold); the
option is psycopg's own name, read here because a URL carries only text.
"""

from __future__ import annotations

import os
import time
import weakref
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool

from xsm_celery.errors import ConfigurationError, StoreUnavailableError

__all__ = [
    "FILE_MODE",
    "PING_IDLE_S",
    "PREPARE_THRESHOLD",
    "SQLITE_BUSY_TIMEOUT_S",
    "make_engine",
    "normalize_url",
    "safe_url",
    "sqlite_path",
]

#: Seconds a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_TIMEOUT_S = 15.0

#: A pooled connection idle at least this many seconds is pinged before it is used again.
PING_IDLE_S = 1.0

#: Where a pooled connection's record keeps the moment it went back to the pool.
_IDLE_SINCE = "xsm_idle_since"

#: Mode of the SQLite files the stores create: the owner reads and writes, nobody else.
FILE_MODE = 0o600

_PSYCOPG_ALIASES = {"postgresql", "postgres", "postgresql+psycopg"}

#: The URL query option that sets psycopg's ``prepare_threshold`` (``none`` disables it).
PREPARE_THRESHOLD = "prepare_threshold"


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and pick the psycopg (3) driver for a bare ``postgresql://`` URL.

    SQLAlchemy's default PostgreSQL driver is psycopg2, which this package does not depend
    on; ``postgres://`` (Heroku's spelling) is accepted as well.

    Raises:
        ConfigurationError: the URL cannot be parsed.
    """
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError(
            f"cannot parse database URL {_mask(str(url))!r}: {exc}; use sqlite:///path.db "
            "or postgresql://user@host/db"
        ) from None
    if parsed.drivername in _PSYCOPG_ALIASES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def safe_url(url: str | URL | Engine) -> str:
    """The URL as text with its password hidden, for messages and logs."""
    if isinstance(url, Engine):
        url = url.url
    if isinstance(url, str):
        return _mask(url)
    return url.render_as_string(hide_password=True)


def _mask(text: str) -> str:
    try:
        return make_url(text).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return text


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for any other database or an in-memory one."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str | URL, *, must_exist: bool = False, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` following the package's rules (see the module docstring).

    Args:
        url: A SQLAlchemy URL; ``sqlite:///rel.db`` is relative to the working directory,
            ``sqlite:////abs.db`` absolute.
        must_exist: Refuse a SQLite file that does not exist instead of creating it.
            ``postgresql://user@pgbouncer:6432/db?prepare_threshold=none`` turns psycopg's
            server-side prepared statements off, for PgBouncer in transaction mode.
        kwargs: Passed to ``sqlalchemy.create_engine``.

    Raises:
        StoreUnavailableError: ``must_exist`` and the SQLite file is missing, or its folder
            does not exist.
        ConfigurationError: the URL cannot be parsed, names no installed driver, or has a
            ``prepare_threshold`` that is neither ``none`` nor an integer.
    """
    parsed = _take_prepare_threshold(normalize_url(url), kwargs)
    path = sqlite_path(parsed)
    if path is not None:
        _prepare_sqlite_file(path, must_exist=must_exist, url=parsed)
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_S)
    elif parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("poolclass", StaticPool)
        kwargs.setdefault("connect_args", {}).setdefault("check_same_thread", False)
    ping_idle = parsed.get_backend_name() != "sqlite" and "pool_pre_ping" not in kwargs
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (ImportError, sa.exc.NoSuchModuleError, sa.exc.ArgumentError) as exc:
        raise ConfigurationError(
            f"cannot create an engine for {safe_url(parsed)!r}: {exc}; install its driver "
            "(PostgreSQL: pip install 'psycopg[binary]')"
        ) from None
    if path is not None:
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    if ping_idle:
        _ping_when_idle(engine)
    _dispose_after_fork(engine)
    return engine


def _take_prepare_threshold(url: URL, kwargs: dict[str, Any]) -> URL:
    """Move ``?prepare_threshold=`` from ``url`` into psycopg's connect arguments.

    SQLAlchemy would pass the query value on as a string, which psycopg does not convert.
    """
    value = url.query.get(PREPARE_THRESHOLD)
    if value is None or url.drivername != "postgresql+psycopg":
        return url
    text = value if isinstance(value, str) else value[-1]
    threshold: int | None
    if text.strip().lower() in ("none", "null", ""):
        threshold = None
    elif text.strip().isdigit():
        threshold = int(text)
    else:
        raise ConfigurationError(
            f"{PREPARE_THRESHOLD}={text!r} in {safe_url(url)!r} is neither 'none' nor a "
            "whole number; use prepare_threshold=none behind PgBouncer in transaction mode"
        )
    kwargs.setdefault("connect_args", {}).setdefault(PREPARE_THRESHOLD, threshold)
    return url.difference_update_query([PREPARE_THRESHOLD])


def _prepare_sqlite_file(path: Path, *, must_exist: bool, url: URL) -> None:
    """Create the SQLite file mode 0600 before SQLite does (SQLite would use the umask)."""
    if path.exists():
        return
    if must_exist:
        raise StoreUnavailableError(
            f"no such SQLite database file: {str(path)!r} (from {safe_url(url)!r}); check the "
            "path (sqlite:///rel.db is relative, sqlite:////abs.db absolute) - it is never "
            "created here, and a fresh deployment has none until its first dead letter store "
            "is opened"
        )
    if not path.parent.is_dir():
        raise StoreUnavailableError(
            f"cannot create SQLite database {str(path)!r}: folder {str(path.parent)!r} does "
            "not exist; create it first"
        )
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL lets readers (the CLI) run beside writers (every worker process)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    finally:
        cursor.close()


#: Engines made here that are still alive; a forked child drops their pooled connections.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection on checkout only after ``PING_IDLE_S`` in the pool."""
    dialect = engine.dialect

    def checked_in(dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return  # just connected, or back within a second
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool replaces the connection and tries again (SQLAlchemy's own protocol).
            raise sa.exc.DisconnectionError(f"idle connection failed its ping: {exc}") from exc

    sa.event.listen(engine, "checkin", checked_in)
    sa.event.listen(engine, "checkout", checked_out)


def _dispose_after_fork(engine: Engine) -> None:
    """Drop pooled connections in a forked child, so parent and child never share a socket.

    Celery's prefork pool forks after the app, and often a store, is imported; a connection
    used from two processes corrupts both sessions. One fork hook serves every engine, so
    making many engines does not make every later fork slower.
    """
    _ENGINES.add(engine)


def _reset_engines_in_child() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_engines_in_child)
