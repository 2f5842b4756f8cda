"""The in-memory brokers keep the adapter contract and offer the test affordances."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.eda.contract import AsyncBrokerContract, SyncBrokerContract
from xsm_celery.eda import (
    BrokerAdapter,
    BrokerPublishError,
    Envelope,
    EnvelopeTooLargeError,
    FakeBrokerAdapter,
    SyncBrokerAdapter,
    SyncFakeBrokerAdapter,
)
from xsm_celery.errors import RunawayChainError


class TestSyncFakeContract(SyncBrokerContract):
    """SyncFakeBrokerAdapter runs the adapter contract."""

    @pytest.fixture
    def broker(self) -> SyncFakeBrokerAdapter:
        """A fresh in-memory blocking broker."""
        return SyncFakeBrokerAdapter()


class TestAsyncFakeContract(AsyncBrokerContract):
    """FakeBrokerAdapter runs the adapter contract."""

    @pytest.fixture
    def broker(self) -> FakeBrokerAdapter:
        """A fresh in-memory asyncio broker."""
        return FakeBrokerAdapter()


def _env(subject: str = "s-1", **data: object) -> Envelope:
    return Envelope.new(type="xsm.m.GO", subject=subject, data=dict(data))


def test_fakes_satisfy_the_protocols() -> None:
    """Each fake is an instance of the protocol it implements."""
    assert isinstance(SyncFakeBrokerAdapter(), SyncBrokerAdapter)
    assert isinstance(FakeBrokerAdapter(), BrokerAdapter)


def test_published_on_filters_by_topic() -> None:
    """published keeps every publish; published_on only one topic's, oldest first."""
    broker = SyncFakeBrokerAdapter()
    a, b, c = _env(n=1), _env(n=2), _env(n=3)
    broker.publish("x", a)
    broker.publish("y", b)
    broker.publish("x", c)
    assert [e.id for e in broker.published] == [a.id, b.id, c.id]
    assert [e.id for e in broker.published_on("x")] == [a.id, c.id]
    assert broker.published_on("z") == []


def test_deliver_is_not_recorded_as_published() -> None:
    """deliver() queues inbound traffic without counting it as a publish."""
    broker = SyncFakeBrokerAdapter()
    broker.deliver("in", _env())
    assert broker.published == []
    assert broker.pending("in") == 1


def test_fail_next_publish_raises_then_recovers() -> None:
    """An injected failure raises once, records nothing, and the next publish works."""
    broker = SyncFakeBrokerAdapter()
    broker.fail_next_publish()
    with pytest.raises(BrokerPublishError):
        broker.publish("t", _env())
    assert broker.published == []
    broker.publish("t", _env())
    assert len(broker.published) == 1


def test_fail_next_publish_custom_error_and_times() -> None:
    """A given exception is raised the given number of times, in order."""
    broker = SyncFakeBrokerAdapter()
    broker.fail_next_publish(ConnectionError("down"), times=2)
    for _ in range(2):
        with pytest.raises(ConnectionError, match="down"):
            broker.publish("t", _env())
    broker.publish("t", _env())


@pytest.mark.parametrize("times", [0, -1, True, 1.5])
def test_fail_next_publish_refuses_bad_times(times: object) -> None:
    """times must be a positive int."""
    with pytest.raises(ValueError, match="times"):
        SyncFakeBrokerAdapter().fail_next_publish(times=times)  # type: ignore[arg-type]


def test_fail_next_publish_refuses_base_exceptions() -> None:
    """Injecting KeyboardInterrupt is refused: it would stop the runner, not the broker."""
    with pytest.raises(TypeError):
        SyncFakeBrokerAdapter().fail_next_publish(KeyboardInterrupt())  # type: ignore[arg-type]


def test_oversized_publish_fails_like_a_real_wire() -> None:
    """An envelope over the broker's byte cap is refused at publish."""
    broker = SyncFakeBrokerAdapter(max_bytes=200)
    with pytest.raises(EnvelopeTooLargeError):
        broker.publish("t", _env(blob="x" * 500))


def test_consumer_mutation_does_not_leak() -> None:
    """Mutating a delivery's data changes neither the redelivery nor the published record."""
    broker = SyncFakeBrokerAdapter()
    broker.publish("t", _env(n=1))
    [d] = list(broker.subscribe("t", timeout=0))
    d.envelope.data["n"] = 99
    d.nack(requeue=True)
    [again] = list(broker.subscribe("t", timeout=0))
    again.ack()
    assert again.envelope.data == {"n": 1}
    assert broker.published[0].data == {"n": 1}


def test_on_and_drain_run_handlers_until_quiet() -> None:
    """drain() runs handlers, including for what they publish, and acks each envelope."""
    broker = SyncFakeBrokerAdapter()
    seen: list[str] = []

    def forward(env: Envelope) -> None:
        seen.append(f"a:{env.data['n']}")
        broker.publish("b", _env(n=env.data["n"]))

    broker.on("a", forward)
    broker.on("b", lambda env: seen.append(f"b:{env.data['n']}"))
    broker.deliver("a", _env(n=1))
    broker.deliver("a", _env(n=2))
    assert broker.drain() == 4
    assert sorted(seen) == ["a:1", "a:2", "b:1", "b:2"]
    assert len(broker.acked) == 4
    assert broker.in_flight == 0


def test_drain_handler_failure_nacks_and_propagates() -> None:
    """A raising handler nacks its envelope without requeue and the error propagates."""
    broker = SyncFakeBrokerAdapter()

    def boom(env: Envelope) -> None:
        raise RuntimeError("handler failed")

    broker.on("a", boom)
    broker.deliver("a", _env())
    with pytest.raises(RuntimeError, match="handler failed"):
        broker.drain()
    assert len(broker.nacked) == 1
    assert broker.pending("a") == 0


def test_drain_stops_a_self_feeding_handler() -> None:
    """A handler publishing to its own topic is stopped at the limit as a runaway chain."""
    broker = SyncFakeBrokerAdapter()
    broker.on("a", lambda env: broker.publish("a", _env()))
    broker.deliver("a", _env())
    with pytest.raises(RunawayChainError, match="still not empty"):
        broker.drain(limit=10)
    assert broker.pending("a") == 1
    assert broker.in_flight == 0


def test_drain_keeps_the_envelope_on_keyboard_interrupt() -> None:
    """An interrupted handler puts its envelope back, unsettled and uncounted."""
    broker = SyncFakeBrokerAdapter()

    def interrupt(env: Envelope) -> None:
        raise KeyboardInterrupt

    broker.on("a", interrupt)
    broker.deliver("a", _env())
    with pytest.raises(KeyboardInterrupt):
        broker.drain()
    assert broker.pending("a") == 1
    assert broker.nacked == []
    [d] = list(broker.subscribe("a", timeout=0))
    assert d.envelope.attempt == 0


def test_blocking_subscribe_wakes_on_publish() -> None:
    """A subscriber waiting on an idle topic receives an envelope published from a thread."""
    broker = SyncFakeBrokerAdapter()
    sent = _env()
    timer = threading.Timer(0.05, broker.publish, args=("t", sent))
    timer.start()
    got = next(iter(broker.subscribe("t", timeout=5)))
    got.ack()
    timer.join()
    assert got.envelope.id == sent.id


def test_async_subscribe_ends_after_idle_timeout() -> None:
    """An async subscription with a timeout ends when the topic stays empty."""
    broker = FakeBrokerAdapter()

    async def scenario() -> int:
        return len([d async for d in broker.subscribe("t", timeout=0.01)])

    assert asyncio.run(scenario()) == 0


def test_clear_forgets_everything() -> None:
    """clear() empties queues, records and injected failures."""
    broker = SyncFakeBrokerAdapter()
    broker.publish("t", _env())
    broker.fail_next_publish()
    broker.clear()
    assert broker.published == []
    assert broker.pending("t") == 0
    broker.publish("t", _env())
