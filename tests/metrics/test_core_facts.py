"""The core's run paths report their facts: breaker, relay, dispatcher, machine timers, replay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.persistence.test_timers import T0, _retry, _start
from xsm_celery import create_machine, hooks
from xsm_celery.eda import Envelope, InboundDispatcher, OutboxRelay, SyncFakeBrokerAdapter
from xsm_celery.eda.outbox_store import MemoryOutboxStore
from xsm_celery.eda.replay import replay_dead_letter
from xsm_celery.hooks import Fact, FactKind
from xsm_celery.patterns import CircuitBreaker
from xsm_celery.persistence import DueTimerScanner, MemoryInbox, MemoryStore

SHIPPING = {
    "id": "shipping",
    "initial": "waiting",
    "states": {"waiting": {"on": {"order.paid": "packing"}}, "packing": {}},
}


@pytest.fixture
def facts() -> Iterator[list[Fact]]:
    """Every fact emitted during the test."""
    seen: list[Fact] = []
    stop = hooks.subscribe(seen.append)
    try:
        yield seen
    finally:
        stop()


def of(facts: list[Fact], kind: FactKind) -> list[dict[str, Any]]:
    """The fields of the facts of one kind."""
    return [dict(f.fields) for f in facts if f.kind is kind]


def test_breaker_transitions(facts: list[Fact]) -> None:
    """Opening an in-process breaker reports closed -> open with its name and scope."""
    breaker = CircuitBreaker(failure_threshold=1, name="psp")

    def fail() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        breaker.call(fail)
    assert of(facts, FactKind.BREAKER_TRANSITION) == [
        {
            "breaker": "psp",
            "from_state": "closed",
            "to_state": "open",
            "reason": "failure",
            "scope": "process",
        }
    ]


def test_relay_reports_rows_per_topic(facts: list[Fact]) -> None:
    """One OUTBOX_RELAYED per run of a topic, with the row count."""
    outbox = MemoryOutboxStore()
    for topic in ("a", "a", "b"):
        outbox.add(topic, Envelope.new(type="t", subject="s"))
    assert OutboxRelay(outbox, SyncFakeBrokerAdapter()).relay_once_sync() == 3
    relayed = of(facts, FactKind.OUTBOX_RELAYED)
    assert [(f["topic"], f["rows"]) for f in relayed] == [("a", 2), ("b", 1)]


def test_dispatcher_outcomes_and_its_dead_letters(facts: list[Fact]) -> None:
    """Processed, duplicate and dead-lettered deliveries each report their outcome."""
    broker = SyncFakeBrokerAdapter()
    dispatcher = InboundDispatcher(
        MemoryStore(), {"order.paid": create_machine(SHIPPING)}, inbox=MemoryInbox()
    )
    env = Envelope.new(type="order.paid", subject="o-1")
    for item in (env, env, Envelope.new(type="order.lost", subject="o-2")):
        broker.publish("orders", item)
    result = dispatcher.run_once_sync(broker, "orders")
    assert (result.processed, result.duplicates, result.dead_lettered) == (1, 1, 1)
    outcomes = [
        (f["outcome"], f["machine"], f["topic"]) for f in of(facts, FactKind.DISPATCH_OUTCOME)
    ]
    assert outcomes == [
        ("processed", "shipping", "orders"),
        ("duplicate", "shipping", "orders"),
        ("dead_lettered", None, "orders"),
    ]
    [dead] = of(facts, FactKind.DEAD_LETTER_WRITTEN)
    assert (dead["source"], dead["reason"]) == ("dispatcher", "unknown_event")
    record = dispatcher.dead_letters.all()[0]
    dispatcher.machine_for_type["order.lost"] = create_machine(
        {**SHIPPING, "states": {"waiting": {"on": {"order.lost": "packing"}}, "packing": {}}}
    )
    replay_dead_letter(
        dispatcher.dead_letters,
        record.id,
        dispatcher,
        reason="chart added",
        dry_run=False,
        force=True,
    )
    [replayed] = of(facts, FactKind.DEAD_LETTER_REPLAYED)
    assert (replayed["source"], replayed["outcome"]) == ("dispatcher", "processed")


def test_a_machine_timer_reports_its_lag(facts: list[Fact]) -> None:
    """A scan 2.5 s after the due time reports a fired machine timer 2.5 s late."""
    store = MemoryStore()
    _start(store)
    assert DueTimerScanner(store, _retry()).run_once(T0 + 3.5) == 1
    [fired] = of(facts, FactKind.TIMER_FIRED)
    assert fired["purpose"] == "machine"
    assert fired["lag_s"] == pytest.approx(2.5)


def test_the_dead_letter_plugin_reports_its_records(facts: list[Fact]) -> None:
    """A chart entering its dead-letter state through DeadLetterPlugin reports the record."""
    from xsm_celery import SyncInterpreter
    from xsm_celery.patterns import DeadLetterPlugin, DeadLetterStore

    chart = create_machine(
        {
            "id": "job",
            "initial": "working",
            "states": {"working": {"on": {"FAIL": "dead"}}, "dead": {"tags": ["dead-letter"]}},
        }
    )
    store = DeadLetterStore()
    interp = SyncInterpreter(chart)
    interp.use(DeadLetterPlugin(store))
    interp.start()
    interp.send("FAIL")
    assert len(store.all()) == 1
    [written] = of(facts, FactKind.DEAD_LETTER_WRITTEN)
    assert (written["source"], written["machine"]) == ("plugin", "job")
