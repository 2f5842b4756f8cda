"""PgBouncer in transaction pooling mode: why ``?prepare_threshold=none``, and that it works.

The stores' own tests run through the pooler too (the ``pgbouncer`` parameter of their
database fixtures); these tests pin the one setting that needs and the URL option's parsing.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.pgbouncer import PgBouncer
from xsm_celery.errors import ConfigurationError
from xsm_celery.sqlalchemy.connect import make_engine

#: More than psycopg's default prepare_threshold (5): the statement gets prepared.
RUNS = 12


class _Stop(Exception):
    """Raised by the connect hook so that no connection is attempted."""


def _connect_params(url: str, **kwargs: Any) -> dict[str, Any]:
    """The keyword arguments ``make_engine(url)`` would pass to ``psycopg.connect``."""
    engine = make_engine(url, **kwargs)
    seen: dict[str, Any] = {}

    def capture(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        seen.update(cparams)
        raise _Stop

    sa.event.listen(engine, "do_connect", capture)
    try:
        with pytest.raises(_Stop), engine.connect():
            pass
    finally:
        engine.dispose()
    return seen


def _take_turns(url: str, clients: int = 3) -> None:
    """Run one statement ``RUNS`` times on each of ``clients`` engines, taking turns."""
    engines = [make_engine(url, pool_size=1, max_overflow=0) for _ in range(clients)]
    try:
        for n in range(RUNS):
            for engine in engines:
                # Committed, as the stores' writes are: psycopg forgets its prepared
                # statements on a rollback, so only commits let the count reach the threshold.
                with engine.begin() as conn:
                    assert conn.execute(sa.text("SELECT :n + 1"), {"n": n}).scalar() == n + 1
    finally:
        for engine in engines:
            engine.dispose()


def test_prepared_statements_break_through_the_pooler(pgbouncer: PgBouncer) -> None:
    """psycopg's default prepares on a server session another client then gets."""
    with pytest.raises(sa.exc.DBAPIError, match="prepared statement"):
        _take_turns(pgbouncer.url(pgbouncer.database))


def test_prepare_threshold_none_keeps_clients_apart(pgbouncer_url: str) -> None:
    """With ?prepare_threshold=none nothing is prepared, so clients share server sessions."""
    _take_turns(pgbouncer_url)


def test_the_option_becomes_a_connect_argument_and_leaves_the_url(pgbouncer_url: str) -> None:
    """psycopg gets None (not the text 'none'); the engine's URL no longer carries it."""
    engine = make_engine(pgbouncer_url)
    try:
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection.prepare_threshold is None  # type: ignore[union-attr]
        assert "prepare_threshold" not in engine.url.query
    finally:
        engine.dispose()


@pytest.mark.parametrize(("text", "expected"), [("none", None), ("None", None), ("3", 3)])
def test_the_option_is_none_or_a_whole_number(text: str, expected: int | None) -> None:
    """``none`` (any case) turns preparation off; a whole number is the threshold."""
    params = _connect_params(f"postgresql://u@127.0.0.1:1/db?prepare_threshold={text}")
    assert params["prepare_threshold"] == expected


def test_a_bad_threshold_is_refused_with_the_fix() -> None:
    """Another value names the option and the setting PgBouncer needs."""
    with pytest.raises(ConfigurationError, match="prepare_threshold=none"):
        make_engine("postgresql://u@127.0.0.1:1/db?prepare_threshold=often")


def test_an_explicit_connect_argument_wins() -> None:
    """connect_args given to make_engine are kept over the URL's option."""
    params = _connect_params(
        "postgresql://u@127.0.0.1:1/db?prepare_threshold=none",
        connect_args={"prepare_threshold": 7},
    )
    assert params["prepare_threshold"] == 7


def test_without_the_option_psycopg_keeps_its_default() -> None:
    """A URL without the option passes nothing, so direct PostgreSQL behaves as before."""
    assert "prepare_threshold" not in _connect_params("postgresql://u@127.0.0.1:1/db")
