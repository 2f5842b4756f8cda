"""Fixtures shared by the whole suite: real service URLs, checked before use."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests import services
from tests.pgbouncer import PgBouncer, start_pgbouncer_with_database


@pytest.fixture
def redis_url() -> str:
    """URL of the local Redis; skips locally and fails under CI when it is down."""
    services.require("redis")
    return services.REDIS_URL


@pytest.fixture
def rabbitmq_url() -> str:
    """URL of the local RabbitMQ; skips locally and fails under CI when it is down."""
    services.require("rabbitmq")
    return services.RABBITMQ_URL


@pytest.fixture
def postgres_url() -> str:
    """URL of the local PostgreSQL database ``test``; fails under CI when it is down."""
    services.require("postgres")
    return services.POSTGRES_URL


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A PgBouncer in transaction pooling mode in front of the local PostgreSQL.

    Skips locally and fails under CI when PostgreSQL is down or pgbouncer is not installed.
    """
    services.require("postgres")
    try:
        bouncer = start_pgbouncer_with_database()
    except RuntimeError as exc:
        if services.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pgbouncer_url(pgbouncer: PgBouncer) -> Iterator[str]:
    """A store URL through PgBouncer (prepared statements off), its tables dropped after."""
    with pgbouncer.clean_database() as url:
        yield url


@pytest.fixture(autouse=True)
def _warnings_reach_caplog(caplog: pytest.LogCaptureFixture) -> None:
    """Let WARNING records reach caplog whatever an earlier test's Celery worker did to logging.

    Starting a Celery worker in the test process raises the root logger's level and may
    disable loggers that existed then; tests that check a logged warning must not depend on
    whether a worker ran before them.
    """
    caplog.set_level(logging.WARNING)
    for name, logger in logging.root.manager.loggerDict.items():
        if name.startswith("xsm_celery") and isinstance(logger, logging.Logger):
            logger.disabled = False
