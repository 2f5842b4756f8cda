"""Fixtures shared by the whole suite: real service URLs, checked before use."""

from __future__ import annotations

import logging

import pytest

from tests import services


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
