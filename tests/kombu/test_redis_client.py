"""The adapter's kombu Redis channels reuse one redis-py client instead of one per command.

That the reused client survives a Redis restart is ``test_adapter``'s
``test_publish_survives_a_redis_restart`` and ``test_dispatch_faults``' restart test.
"""

from __future__ import annotations

import pytest
import redis
from kombu import Connection

from xsm_celery.eda import Envelope, new_id
from xsm_celery.kombu import KombuBrokerAdapter
from xsm_celery.kombu.redis_client import reuse_redis_client


@pytest.fixture
def constructions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every ``redis.Redis`` the test builds."""
    made: list[int] = []
    original = redis.Redis.__init__

    def counted(self: redis.Redis, *args: object, **kwargs: object) -> None:
        made.append(1)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    return made


def test_publishing_and_acking_build_a_client_per_channel_not_per_message(
    redis_db_url: str, constructions: list[int]
) -> None:
    topic = f"reuse-{new_id()}"
    with KombuBrokerAdapter(redis_db_url) as adapter:
        adapter.declare(topic)
        constructions.clear()
        for n in range(20):
            adapter.publish(topic, Envelope.new(type="t", subject=str(n)))
        after_publishing = len(constructions)
        got = []
        for delivery in adapter.subscribe(topic, timeout=0.5):
            got.append(delivery.envelope.subject)
            delivery.ack()
        adapter.delete(topic)
    assert sorted(got, key=int) == [str(n) for n in range(20)]
    # kombu alone builds one per LPUSH (20) and one per ack pipeline (20 more).
    assert after_publishing <= 2
    assert len(constructions) <= 6


def test_a_new_pool_after_a_disconnect_gets_a_new_client(redis_db_url: str) -> None:
    with Connection(redis_db_url) as conn:
        channel = conn.default_channel
        assert reuse_redis_client(channel)
        first = channel._create_client()
        assert channel._create_client() is first
        channel._disconnect_pools()  # what kombu does when the connection drops
        second = channel._create_client()
        assert second is not first
        assert second.connection_pool is channel.pool
        assert second.ping()


def test_channels_of_other_transports_are_left_alone() -> None:
    with Connection("memory://") as conn:
        channel = conn.default_channel
        assert not reuse_redis_client(channel)
