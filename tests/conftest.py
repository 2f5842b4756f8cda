"""Fixtures shared by the whole suite: real service URLs, checked before use."""

from __future__ import annotations

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
