"""The broker adapter contract, run by ``KombuBrokerAdapter`` on real Redis and RabbitMQ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.eda.contract import SyncBrokerContract
from tests.kombu.private_redis import PrivateRedis
from xsm_celery.kombu import KombuBrokerAdapter

pytestmark = pytest.mark.service


class _KombuTiming:
    receive_timeout = 2.0
    quiet_timeout = 0.3


class TestContractOnRedis(_KombuTiming, SyncBrokerContract):
    """The contract on a real redis-server (this session's own, so a test may stop it)."""

    @pytest.fixture
    def broker(self, running_redis: PrivateRedis) -> Iterator[KombuBrokerAdapter]:
        """An adapter on database 5 of the private Redis, closed after the test."""
        adapter = KombuBrokerAdapter(running_redis.url(5), retries=1)
        self.server = running_redis
        yield adapter
        adapter.close()

    def make_publish_fail(self, broker: Any) -> None:
        """Kill the Redis server: the publish finds no broker to accept it."""
        self.server.stop()


class TestContractOnRedisPartitioned(_KombuTiming, SyncBrokerContract):
    """The contract holds with a topic split over several partition queues."""

    @pytest.fixture
    def broker(self, running_redis: PrivateRedis) -> Iterator[KombuBrokerAdapter]:
        """An adapter with four partitions per topic on the private Redis."""
        adapter = KombuBrokerAdapter(running_redis.url(5), partitions=4, retries=1)
        self.server = running_redis
        yield adapter
        adapter.close()

    def make_publish_fail(self, broker: Any) -> None:
        """Kill the Redis server: the publish finds no broker to accept it."""
        self.server.stop()


class TestContractOnRabbitMQ(_KombuTiming, SyncBrokerContract):
    """The contract on the shared RabbitMQ, over quorum queues."""

    @pytest.fixture
    def broker(self, rabbitmq_url: str, topic: str) -> Iterator[KombuBrokerAdapter]:
        """An adapter on RabbitMQ; the test's queues are deleted afterwards."""
        adapter = KombuBrokerAdapter(rabbitmq_url)
        yield adapter
        adapter.delete(topic)
        adapter.close()

    def make_publish_fail(self, broker: Any) -> None:
        """Declare full queues that refuse publishes: the broker nacks the confirm.

        A classic queue refuses the very first message over ``x-max-length``; a quorum
        queue only checks the limit once a message is in it.
        """
        broker.queue_type = "classic"
        broker.queue_arguments = {"x-max-length": 0, "x-overflow": "reject-publish"}
