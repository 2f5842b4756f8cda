"""The broker adapter contract, as reusable test classes every adapter's tests inherit.

Use it from an adapter's test module by subclassing and providing a ``broker`` fixture::

    from tests.eda.contract import SyncBrokerContract

    class TestKombuOnRedis(SyncBrokerContract):
        receive_timeout = 2.0

        @pytest.fixture
        def broker(self, redis_url):
            adapter = KombuBrokerAdapter(redis_url)
            yield adapter
            adapter.close()

        def make_publish_fail(self, broker):
            broker.connection.close()  # whatever makes the next publish fail for real

``AsyncBrokerContract`` is the same suite for asyncio adapters. Each test uses a fresh
topic (the ``topic`` fixture), so tests never see each other's traffic on a real broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from xsm_celery.eda import Delivery, Envelope, new_id

__all__ = ["AsyncBrokerContract", "SyncBrokerContract", "contract_envelopes"]


def contract_envelopes() -> list[Envelope]:
    """Five envelopes over two interleaved subjects: a1 b1 a2 b2 a3."""
    order = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    return [
        Envelope.new(type="xsm.contract.STEP", subject=f"s-{name}", data={"n": n})
        for name, n in order
    ]


def _by_subject(envelopes: list[Envelope]) -> dict[str | None, list[str]]:
    out: dict[str | None, list[str]] = {}
    for env in envelopes:
        out.setdefault(env.subject, []).append(env.id)
    return out


class _Contract:
    """What both flavours share: timing, topic naming and the failure hook."""

    #: Idle seconds a ``subscribe`` waits before deciding the topic is empty.
    receive_timeout: float = 0.0
    #: Seconds to wait when checking that nothing (more) arrives.
    quiet_timeout: float = 0.0

    @pytest.fixture
    def topic(self) -> str:
        """A topic no other test uses."""
        return f"contract-{new_id()}"

    def make_publish_fail(self, broker: Any) -> None:
        """Arrange for the next ``publish`` to fail; adapters override this."""
        fail = getattr(broker, "fail_next_publish", None)
        if fail is None:
            pytest.skip("this adapter gives the contract no way to make a publish fail")
        fail()


class SyncBrokerContract(_Contract):
    """The contract for blocking adapters; subclass it and provide a ``broker`` fixture."""

    def receive(self, broker: Any, topic: str, count: int) -> list[Delivery]:
        """Take ``count`` deliveries from ``topic`` (fewer if it runs dry), unsettled."""
        taken: list[Delivery] = []
        if count <= 0:
            return taken
        stream: Iterator[Delivery] = broker.subscribe(topic, timeout=self.receive_timeout)
        for delivery in stream:
            taken.append(delivery)
            if len(taken) >= count:
                break
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        return taken

    def nothing_left(self, broker: Any, topic: str) -> bool:
        """Tell whether ``topic`` has nothing deliverable within ``quiet_timeout``."""
        stream = broker.subscribe(topic, timeout=self.quiet_timeout)
        for delivery in stream:
            broker.nack(delivery, requeue=True)
            stream.close()
            return False
        return True

    def test_order_is_kept_per_subject(self, broker: Any, topic: str) -> None:
        """Deliveries of one subject arrive in publish order."""
        sent = contract_envelopes()
        for env in sent:
            broker.publish(topic, env)
        got = self.receive(broker, topic, len(sent))
        for delivery in got:
            broker.ack(delivery)
        assert _by_subject([d.envelope for d in got]) == _by_subject(sent)

    def test_envelope_arrives_unchanged(self, broker: Any, topic: str) -> None:
        """Every attribute and extension survives the trip through the broker."""
        sent = Envelope.new(
            type="xsm.contract.GO",
            subject="s-1",
            data={"nested": {"list": [1, 2.5, "x", None, True]}},
            correlationid="c-1",
            causationid="k-1",
            extensions={"tenant": "t1", "priority": 3},
        )
        broker.publish(topic, sent)
        [delivery] = self.receive(broker, topic, 1)
        broker.ack(delivery)
        assert delivery.envelope.to_dict() == sent.to_dict()
        assert delivery.topic == topic

    def test_ack_removes_the_delivery(self, broker: Any, topic: str) -> None:
        """An acked delivery is never delivered again."""
        broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
        [delivery] = self.receive(broker, topic, 1)
        broker.ack(delivery)
        assert self.nothing_left(broker, topic)

    def test_unsettled_delivery_stays_in_flight(self, broker: Any, topic: str) -> None:
        """A delivery nobody settled is neither lost nor handed out twice while in flight."""
        sent = Envelope.new(type="xsm.contract.GO", subject="s-1")
        broker.publish(topic, sent)
        [delivery] = self.receive(broker, topic, 1)
        assert self.nothing_left(broker, topic)
        broker.nack(delivery, requeue=True)
        [again] = self.receive(broker, topic, 1)
        broker.ack(again)
        assert again.envelope.id == sent.id

    def test_requeue_goes_back_to_the_head(self, broker: Any, topic: str) -> None:
        """A requeued delivery comes back before the later deliveries of its subject."""
        first = Envelope.new(type="xsm.contract.GO", subject="s-1", data={"n": 1})
        second = Envelope.new(type="xsm.contract.GO", subject="s-1", data={"n": 2})
        broker.publish(topic, first)
        broker.publish(topic, second)
        [delivery] = self.receive(broker, topic, 1)
        assert delivery.envelope.id == first.id
        broker.nack(delivery, requeue=True)
        got = self.receive(broker, topic, 2)
        for item in got:
            broker.ack(item)
        assert [d.envelope.id for d in got] == [first.id, second.id]

    def test_requeue_counts_an_attempt(self, broker: Any, topic: str) -> None:
        """The redelivery of a requeued envelope carries a higher attempt count."""
        broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
        [delivery] = self.receive(broker, topic, 1)
        broker.nack(delivery, requeue=True)
        [again] = self.receive(broker, topic, 1)
        broker.ack(again)
        assert again.envelope.attempt > delivery.envelope.attempt

    def test_nack_without_requeue_drops(self, broker: Any, topic: str) -> None:
        """``nack(requeue=False)`` settles the delivery for good."""
        broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
        [delivery] = self.receive(broker, topic, 1)
        broker.nack(delivery, requeue=False)
        assert self.nothing_left(broker, topic)

    def test_settling_twice_is_a_no_op(self, broker: Any, topic: str) -> None:
        """A second ack or nack of a settled delivery neither raises nor requeues."""
        broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
        [delivery] = self.receive(broker, topic, 1)
        broker.ack(delivery)
        broker.ack(delivery)
        broker.nack(delivery, requeue=True)
        delivery.ack()
        delivery.nack(requeue=True)
        assert self.nothing_left(broker, topic)

    def test_failed_publish_raises(self, broker: Any, topic: str) -> None:
        """A publish the broker did not accept raises instead of returning."""
        self.make_publish_fail(broker)
        with pytest.raises(Exception):
            broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))


class AsyncBrokerContract(_Contract):
    """The contract for asyncio adapters; subclass it and provide a ``broker`` fixture."""

    async def receive(self, broker: Any, topic: str, count: int) -> list[Delivery]:
        """Take ``count`` deliveries from ``topic`` (fewer if it runs dry), unsettled."""
        taken: list[Delivery] = []
        stream = broker.subscribe(topic, timeout=self.receive_timeout)
        try:
            async for delivery in stream:
                taken.append(delivery)
                if len(taken) >= count:
                    break
        finally:
            await stream.aclose()
        return taken

    async def nothing_left(self, broker: Any, topic: str) -> bool:
        """Tell whether ``topic`` has nothing deliverable within ``quiet_timeout``."""
        stream = broker.subscribe(topic, timeout=self.quiet_timeout)
        try:
            async for delivery in stream:
                await broker.nack(delivery, requeue=True)
                return False
        finally:
            await stream.aclose()
        return True

    def test_order_is_kept_per_subject(self, broker: Any, topic: str) -> None:
        """Deliveries of one subject arrive in publish order."""

        async def scenario() -> None:
            sent = contract_envelopes()
            for env in sent:
                await broker.publish(topic, env)
            got = await self.receive(broker, topic, len(sent))
            for delivery in got:
                await broker.ack(delivery)
            assert _by_subject([d.envelope for d in got]) == _by_subject(sent)

        asyncio.run(scenario())

    def test_ack_removes_the_delivery(self, broker: Any, topic: str) -> None:
        """An acked delivery is never delivered again."""

        async def scenario() -> None:
            await broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
            [delivery] = await self.receive(broker, topic, 1)
            await broker.ack(delivery)
            assert await self.nothing_left(broker, topic)

        asyncio.run(scenario())

    def test_requeue_goes_back_to_the_head(self, broker: Any, topic: str) -> None:
        """A requeued delivery comes back before the later deliveries of its subject."""

        async def scenario() -> None:
            first = Envelope.new(type="xsm.contract.GO", subject="s-1", data={"n": 1})
            second = Envelope.new(type="xsm.contract.GO", subject="s-1", data={"n": 2})
            await broker.publish(topic, first)
            await broker.publish(topic, second)
            [delivery] = await self.receive(broker, topic, 1)
            await broker.nack(delivery, requeue=True)
            got = await self.receive(broker, topic, 2)
            for item in got:
                await broker.ack(item)
            assert [d.envelope.id for d in got] == [first.id, second.id]
            assert got[0].envelope.attempt > delivery.envelope.attempt

        asyncio.run(scenario())

    def test_nack_without_requeue_drops(self, broker: Any, topic: str) -> None:
        """``nack(requeue=False)`` settles the delivery for good."""

        async def scenario() -> None:
            await broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
            [delivery] = await self.receive(broker, topic, 1)
            await broker.nack(delivery, requeue=False)
            assert await self.nothing_left(broker, topic)

        asyncio.run(scenario())

    def test_settling_twice_is_a_no_op(self, broker: Any, topic: str) -> None:
        """A second ack or nack of a settled delivery neither raises nor requeues."""

        async def scenario() -> None:
            await broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))
            [delivery] = await self.receive(broker, topic, 1)
            await broker.ack(delivery)
            await broker.ack(delivery)
            await broker.nack(delivery, requeue=True)
            assert await self.nothing_left(broker, topic)

        asyncio.run(scenario())

    def test_failed_publish_raises(self, broker: Any, topic: str) -> None:
        """A publish the broker did not accept raises instead of returning."""
        self.make_publish_fail(broker)

        async def scenario() -> None:
            await broker.publish(topic, Envelope.new(type="xsm.contract.GO", subject="s-1"))

        with pytest.raises(Exception):
            asyncio.run(scenario())
