"""Fixtures for the Celery tests: real worker clusters per broker, and an eager app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from tests import services
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster


def _with_db(url: str, db: int) -> str:
    return f"{url.rstrip('/').rsplit('/', 1)[0]}/{db}" if url.count("/") > 2 else f"{url}/{db}"


@pytest.fixture(scope="module", params=["redis", "rabbitmq"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A broker (Redis or RabbitMQ), a Redis result backend and one prefork worker."""
    services.require("redis")
    services.require(request.param)
    backend = _with_db(services.REDIS_URL, BACKEND_DB)
    broker = (
        _with_db(services.REDIS_URL, BROKER_DB)
        if request.param == "redis"
        else (services.RABBITMQ_URL)
    )
    workdir: Path = tmp_path_factory.mktemp(f"cluster-{request.param}")
    group = Cluster(broker=broker, backend=backend, workdir=workdir)
    group.start_worker("w1")
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def results_redis(cluster: Cluster) -> redis_lib.Redis:
    """The Redis the worker records retries and call counts in."""
    return redis_lib.Redis.from_url(cluster.backend)
