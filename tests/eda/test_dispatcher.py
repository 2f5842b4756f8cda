"""InboundDispatcher: every row of the seed's dispatcher table and its troubleshooting rows."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import pytest

from tests.eda.charts import counter, order
from xsm_celery.eda import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_IN_FLIGHT,
    DispatchResult,
    Envelope,
    FakeBrokerAdapter,
    InboundDispatcher,
    MemoryDeadLetterStore,
    MemoryOutboxStore,
    OutboxPlugin,
    SyncFakeBrokerAdapter,
)
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence import MemoryInbox, MemoryStore

TYPES = {"xsm.counter.INC": counter(), "xsm.counter.FAIL": counter(), "xsm.counter.STOP": counter()}


def _inc(subject: str = "c-1", n: int = 0, **attrs: Any) -> Envelope:
    return Envelope.new(type="xsm.counter.INC", subject=subject, data={"n": n}, **attrs)


def _count(store: MemoryStore, key: str = "c-1") -> int:
    record = store.load(key)
    return 0 if record is None else int(json.loads(record.snapshot)["context"]["count"])


def _seen(store: MemoryStore, key: str) -> list[Any]:
    record = store.load(key)
    return [] if record is None else list(json.loads(record.snapshot)["context"].get("seen", []))


class DownStore(MemoryStore):
    """A store whose backend is down: every load raises StoreUnavailableError."""

    def load(self, key: str) -> Any:
        raise StoreUnavailableError("database is down")


class DownInbox(MemoryInbox):
    """An inbox whose backend is down."""

    def get(self, scope: str, key: str) -> Any:
        raise StoreUnavailableError("inbox is down")


class DownDeadLetters(MemoryDeadLetterStore):
    """A dead-letter store that cannot write."""

    def put(self, record: Any) -> str:
        raise StoreUnavailableError("dead-letter store is down")


def _dispatcher(**options: Any) -> tuple[InboundDispatcher, MemoryStore, MemoryDeadLetterStore]:
    store = options.pop("store", MemoryStore())
    dlq = options.pop("dead_letters", MemoryDeadLetterStore())
    types = options.pop("types", TYPES)
    return InboundDispatcher(store, types, dead_letters=dlq, **options), store, dlq


def test_defaults_have_the_seed_values() -> None:
    """max_attempts defaults to 5 and max_in_flight to 16."""
    assert (DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_IN_FLIGHT) == (5, 16)
    dispatcher, _, _ = _dispatcher()
    assert (dispatcher.max_attempts, dispatcher.max_in_flight) == (5, 16)


def test_processes_into_the_instance_named_by_the_subject() -> None:
    """Each subject is its own persisted instance."""
    dispatcher, store, _ = _dispatcher()
    broker = SyncFakeBrokerAdapter()
    for subject in ("a", "b", "a"):
        broker.deliver("in", _inc(subject))
    result = dispatcher.run_once_sync(broker, "in")
    assert result.processed == 3
    assert (_count(store, "a"), _count(store, "b")) == (2, 1)
    assert broker.in_flight == 0
    assert len(broker.acked) == 3


class TestDedup:
    """Dedup row: with an inbox a redelivery is answered, never re-run."""

    def test_redelivery_is_a_duplicate(self) -> None:
        """The same envelope twice runs the action once."""
        dispatcher, store, _ = _dispatcher(inbox=MemoryInbox())
        broker = SyncFakeBrokerAdapter()
        env = _inc()
        broker.deliver("in", env)
        broker.deliver("in", env)
        result = dispatcher.run_once_sync(broker, "in")
        assert (result.processed, result.duplicates) == (1, 1)
        assert _count(store) == 1
        assert result.outcomes == [(env.id, "processed"), (env.id, "duplicate")]

    def test_without_an_inbox_a_redelivery_runs_twice(self) -> None:
        """Troubleshooting: no inbox= means the same message is processed twice."""
        dispatcher, store, _ = _dispatcher()
        env = _inc()
        dispatcher.handle(env)
        dispatcher.handle(env)
        assert _count(store) == 2

    def test_principal_is_the_source(self) -> None:
        """Two producers reusing one id do not dedup each other."""
        dispatcher, store, _ = _dispatcher(inbox=MemoryInbox())
        dispatcher.handle(_inc(id="same", source="shop-a"))
        dispatcher.handle(_inc(id="same", source="shop-b"))
        assert _count(store) == 2

    def test_dedup_key_changes_the_key(self) -> None:
        """dedup_key= dedups on another attribute (sagas use the causation id)."""
        dispatcher, store, _ = _dispatcher(inbox=MemoryInbox(), dedup_key=lambda e: e.causationid)
        dispatcher.handle(_inc(causationid="k-1"))
        assert dispatcher.handle(_inc(causationid="k-1")).duplicates == 1
        assert _count(store) == 1

    def test_reused_id_with_other_content_is_dead_lettered(self) -> None:
        """Troubleshooting: a reused id with another payload is dead-lettered, not answered."""
        dispatcher, store, dlq = _dispatcher(inbox=MemoryInbox())
        dispatcher.handle(_inc(n=1, id="dup"))
        result = dispatcher.handle(_inc(n=2, id="dup"))
        assert result.dead_lettered == 1
        assert _count(store) == 1
        [record] = dlq.all()
        assert record.reason == "idempotency_mismatch"

    def test_a_failed_attempt_releases_the_claim(self) -> None:
        """A failed delivery is not remembered as processed: its retry runs."""
        dispatcher, _store, _ = _dispatcher(inbox=MemoryInbox())
        broker = SyncFakeBrokerAdapter()
        fail = Envelope.new(type="xsm.counter.FAIL", subject="c-1")
        broker.deliver("in", fail)
        assert dispatcher.run_once_sync(broker, "in").retried == 1
        assert dispatcher.run_once_sync(broker, "in").retried == 1
        assert broker.pending("in") == 1


class TestOrder:
    """Order row: one subject at a time, subjects concurrently, requeues keep order."""

    def test_later_deliveries_of_a_failed_subject_are_requeued_behind_it(self) -> None:
        """When a delivery is requeued, its subject's later deliveries go back behind it."""
        dispatcher, store, _ = _dispatcher()
        broker = SyncFakeBrokerAdapter()
        fail = Envelope.new(type="xsm.counter.FAIL", subject="a")
        later = [_inc("a", n=1), _inc("a", n=2)]
        other = _inc("b", n=9)
        for env in (fail, later[0], other, later[1]):
            broker.deliver("in", env)
        result = dispatcher.run_once_sync(broker, "in")
        assert (result.processed, result.retried) == (1, 3)
        assert _count(store, "a") == 0
        assert _seen(store, "b") == [9]
        queued = [d.envelope.id for d in broker.subscribe("in", timeout=0)]
        assert queued == [fail.id, later[0].id, later[1].id]

    def test_requeued_subject_is_processed_in_order_once_fixed(self) -> None:
        """After the failing delivery is dead-lettered the rest run in their original order."""
        dispatcher, store, _dlq = _dispatcher(max_attempts=2)
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", Envelope.new(type="xsm.counter.FAIL", subject="a"))
        broker.deliver("in", _inc("a", n=1))
        broker.deliver("in", _inc("a", n=2))
        dispatcher.run_once_sync(broker, "in")
        result = dispatcher.run_once_sync(broker, "in")
        assert (result.dead_lettered, result.processed) == (1, 2)
        assert _seen(store, "a") == [1, 2]

    def test_async_run_once_requeues_behind_too(self) -> None:
        """The async loop keeps the same per-subject requeue order."""
        dispatcher, _, _ = _dispatcher()
        broker = FakeBrokerAdapter()
        fail = Envelope.new(type="xsm.counter.FAIL", subject="a")
        later = _inc("a", n=1)

        async def scenario() -> list[str]:
            await broker.deliver("in", fail)
            await broker.deliver("in", later)
            result = await dispatcher.run_once(broker, "in")
            assert result.retried == 2
            return [d.envelope.id async for d in broker.subscribe("in", timeout=0)]

        assert asyncio.run(scenario()) == [fail.id, later.id]

    def test_subjects_run_concurrently_up_to_max_in_flight(self) -> None:
        """With offloaded steps, different subjects overlap, never more than max_in_flight."""
        active: dict[str, int] = {}
        peak = {"all": 0, "same_subject": 0}
        lock = threading.Lock()

        def slow(i: Any, ctx: dict[str, Any], e: Any, a: Any) -> None:
            with lock:
                active[i.store_key] = active.get(i.store_key, 0) + 1
                peak["all"] = max(peak["all"], sum(active.values()))
                peak["same_subject"] = max(peak["same_subject"], active[i.store_key])
            time.sleep(0.02)
            with lock:
                active[i.store_key] -= 1

        from xsm_celery import MachineLogic, create_machine

        machine = create_machine(
            {"id": "slow", "initial": "s", "states": {"s": {"on": {"GO": {"actions": "slow"}}}}},
            logic=MachineLogic(actions={"slow": slow}),
        )
        dispatcher, _, _ = _dispatcher(
            types={"xsm.slow.GO": machine}, max_in_flight=3, offload=True
        )
        broker = FakeBrokerAdapter()

        async def scenario() -> DispatchResult:
            for n in range(12):
                await broker.deliver("in", Envelope.new(type="xsm.slow.GO", subject=f"s-{n % 6}"))
            return await dispatcher.run_once(broker, "in")

        result = asyncio.run(scenario())
        assert result.processed == 12
        assert 1 < peak["all"] <= 3
        assert peak["same_subject"] == 1


class TestPoison:
    """Poison row: dead-lettered and acked at max_attempts, never an endless loop."""

    def test_poison_is_dead_lettered_and_acked_after_max_attempts(self) -> None:
        """A delivery failing every time is requeued max_attempts-1 times, then dead-lettered."""
        dispatcher, _store, dlq = _dispatcher()
        broker = SyncFakeBrokerAdapter()
        poison = Envelope.new(type="xsm.counter.FAIL", subject="c-1", data={"card": "4111"})
        broker.deliver("in", poison)
        outcomes = [dispatcher.run_once_sync(broker, "in") for _ in range(5)]
        assert [r.retried for r in outcomes] == [1, 1, 1, 1, 0]
        assert outcomes[-1].dead_lettered == 1
        assert broker.pending("in") == 0
        assert broker.in_flight == 0
        assert broker.acked[-1].id == poison.id
        [record] = dlq.all()
        assert record.reason == "max_attempts"
        assert record.attempts == 5
        assert record.envelope["id"] == poison.id
        assert record.envelope["data"] == {"card": "***"}
        assert record.machine_id == "counter"
        assert record.machine_hash == TYPES["xsm.counter.FAIL"].structure_hash
        assert record.errors[0]["message"].endswith("action exploded")
        assert record.topic == "in"
        assert dispatcher.run_once_sync(broker, "in").total == 0

    def test_own_count_dead_letters_without_a_broker_count(self) -> None:
        """With no xsmattempt (handle() has no broker), the dispatcher's own count decides."""
        dispatcher, _, _dlq = _dispatcher(max_attempts=3)
        poison = Envelope.new(type="xsm.counter.FAIL", subject="c-1")
        labels = [dispatcher.handle(poison).outcomes[0][1] for _ in range(3)]
        assert labels == ["retried", "retried", "dead_lettered"]
        assert dispatcher.failures_of(poison.id) == 0

    def test_attempts_are_the_larger_of_envelope_and_own_count(self) -> None:
        """An envelope arriving with xsmattempt=4 dead-letters at its first failure."""
        dispatcher, _, dlq = _dispatcher()
        poison = Envelope.new(type="xsm.counter.FAIL", subject="c-1").with_attempt(4)
        assert dispatcher.handle(poison).dead_lettered == 1
        assert dlq.all()[0].attempts == 5

    def test_an_envelope_over_budget_is_not_run_again(self) -> None:
        """A delivery already at max_attempts (its worker kept dying) is dead-lettered unrun."""
        dispatcher, store, dlq = _dispatcher()
        assert dispatcher.handle(_inc().with_attempt(5)).dead_lettered == 1
        assert _count(store) == 0
        assert dlq.all()[0].reason == "max_attempts"

    @pytest.mark.parametrize("hook", ["machine_for_type", "key_for", "dedup_key", "event_type"])
    def test_a_raising_user_hook_counts_as_an_attempt(self, hook: str) -> None:
        """Troubleshooting: a user hook raising on every delivery ends as max_attempts."""

        def broken(*args: Any) -> Any:
            raise ValueError("user hook failed")

        options: dict[str, Any] = {"max_attempts": 2, "inbox": MemoryInbox()}
        if hook == "machine_for_type":
            options["types"] = broken
        else:
            options[hook] = broken
        dispatcher, _, dlq = _dispatcher(**options)
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", _inc())
        assert dispatcher.run_once_sync(broker, "in").retried == 1
        assert dispatcher.run_once_sync(broker, "in").dead_lettered == 1
        assert dlq.all()[0].reason == "max_attempts"


class TestFailure:
    """Failure row: nothing committed, requeued; infrastructure errors never escape."""

    def test_a_receipt_error_is_not_committed(self) -> None:
        """An action error leaves the stored snapshot untouched and requeues."""
        dispatcher, store, _ = _dispatcher()
        dispatcher.handle(_inc())
        before = store.load("c-1")
        result = dispatcher.handle(Envelope.new(type="xsm.counter.FAIL", subject="c-1"))
        assert result.retried == 1
        assert store.load("c-1") == before

    def test_failed_step_publishes_nothing(self) -> None:
        """A step that failed announces nothing through the outbox."""
        outbox = MemoryOutboxStore()
        dispatcher, _, _ = _dispatcher(plugins=[OutboxPlugin(outbox, topic="ev")])

        def fail_after_inc(i: Any, ctx: Any, e: Any, a: Any) -> None:
            raise RuntimeError("late failure")

        from xsm_celery import MachineLogic, create_machine

        machine = create_machine(
            {
                "id": "m",
                "initial": "a",
                "context": {},
                "states": {
                    "a": {
                        "on": {
                            "GO": {"target": "b", "actions": "late", "meta": {"publish": "m.moved"}}
                        }
                    },
                    "b": {},
                },
            },
            logic=MachineLogic(actions={"late": fail_after_inc}),
        )
        dispatcher.machine_for_type = {"xsm.m.GO": machine}
        assert dispatcher.handle(Envelope.new(type="xsm.m.GO", subject="x")).retried == 1
        assert outbox.count() == 0

    def test_store_down_is_requeued_and_never_counted(self) -> None:
        """Troubleshooting: with the store down a message is requeued, never dead-lettered."""
        dispatcher, _, dlq = _dispatcher(store=DownStore(), max_attempts=2)
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", _inc())
        for _ in range(4):
            assert dispatcher.run_once_sync(broker, "in").retried == 1
        assert dlq.all() == []
        assert broker.pending("in") == 1

    def test_inbox_down_is_requeued(self) -> None:
        """An inbox outage requeues the delivery without running it."""
        dispatcher, store, dlq = _dispatcher(inbox=DownInbox())
        assert dispatcher.handle(_inc()).retried == 1
        assert _count(store) == 0
        assert dlq.all() == []

    def test_dead_letter_store_down_is_requeued(self) -> None:
        """A poison message whose dead letter cannot be written is requeued, not lost."""
        dispatcher, _, _ = _dispatcher(dead_letters=DownDeadLetters())
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", Envelope.new(type="xsm.nobody.GO", subject="x"))
        assert dispatcher.run_once_sync(broker, "in").retried == 1
        assert broker.pending("in") == 1

    def test_errors_are_logged_not_raised(self, caplog: pytest.LogCaptureFixture) -> None:
        """An infrastructure failure is logged with the envelope id."""
        dispatcher, _, _ = _dispatcher(store=DownStore())
        env = _inc()
        with caplog.at_level(logging.WARNING, logger="xsm_celery.eda"):
            dispatcher.handle(env)
        assert env.id in caplog.text


class TestUnknownAndCorrupt:
    """Unknown / corrupt row: dead-lettered on the first attempt, never raised."""

    def test_unknown_type_is_dead_lettered(self) -> None:
        """A type no machine handles is dead-lettered as unknown_event and acked."""
        dispatcher, _, dlq = _dispatcher()
        broker = SyncFakeBrokerAdapter()
        env = Envelope.new(type="xsm.billing.CHARGE", subject="x")
        broker.deliver("in", env)
        assert dispatcher.run_once_sync(broker, "in").dead_lettered == 1
        assert broker.pending("in") == 0
        [record] = dlq.all()
        assert (record.reason, record.machine_id) == ("unknown_event", "billing")

    def test_unknown_type_ignored_on_a_shared_bus(self) -> None:
        """on_unknown='ignore' acks unknown types and counts them as ignored."""
        dispatcher, _, dlq = _dispatcher(on_unknown="ignore")
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", Envelope.new(type="other.team.event", subject="x"))
        assert dispatcher.run_once_sync(broker, "in").ignored == 1
        assert dlq.all() == []
        assert broker.pending("in") == 0

    def test_callable_mapping_returning_none_is_unknown(self) -> None:
        """A machine_for_type callable returning None means unknown."""
        dispatcher, _, dlq = _dispatcher(types=lambda t: None)
        assert dispatcher.handle(_inc()).dead_lettered == 1
        assert dlq.all()[0].reason == "unknown_event"

    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            ("{not json", "not JSON"),
            ('{"specversion": "1.0", "id": "i", "source": "s", "subject": "x"}', "'type' missing"),
            (
                json.dumps(
                    {
                        "specversion": "1.0",
                        "id": "i",
                        "type": "xsm.counter.INC",
                        "source": "s",
                        "subject": "x",
                        "authorization": "Bearer t",
                    }
                ),
                "credential-bearing",
            ),
            (
                json.dumps(
                    {
                        "specversion": "1.0",
                        "id": "i",
                        "type": "xsm.counter.INC",
                        "source": "s",
                        "subject": "x",
                        "data": {"d": json.loads("[" * 80 + "]" * 80)},
                    }
                ),
                "nested deeper than 64",
            ),
            ("[" * 100_000 + "]" * 100_000, "nested deeper"),
            (
                json.dumps(
                    {
                        "specversion": "1.0",
                        "id": "i",
                        "type": "xsm.counter.INC",
                        "source": "s",
                        "subject": "x",
                        "data": {"blob": "x" * 1_100_000},
                    }
                ),
                "cap",
            ),
            (
                json.dumps(
                    {
                        "specversion": "1.0",
                        "id": "i",
                        "type": "xsm.counter.INC",
                        "source": "s",
                        "subject": "x",
                        "traceparent": "nope",
                    }
                ),
                "traceparent",
            ),
        ],
        ids=[
            "not-json",
            "missing-type",
            "credential",
            "deep",
            "parser-deep",
            "oversized",
            "traceparent",
        ],
    )
    def test_malformed_envelopes_are_dead_lettered_as_corrupt(self, raw: str, message: str) -> None:
        """Malformed, credential-bearing, deep and oversized envelopes: corrupt, not raised."""
        dispatcher, store, dlq = _dispatcher()
        result = dispatcher.handle(raw)
        assert result.dead_lettered == 1
        [record] = dlq.all()
        assert record.reason == "corrupt"
        assert message in record.errors[0]["message"]
        assert len(json.dumps(record.envelope)) < 10_000
        assert store.list_keys() == []

    def test_envelope_without_subject_is_corrupt(self) -> None:
        """An envelope with no subject cannot name an instance: corrupt."""
        dispatcher, _, dlq = _dispatcher()
        assert dispatcher.handle(Envelope.new(type="xsm.counter.INC")).dead_lettered == 1
        assert "envelope has no subject" in dlq.all()[0].errors[0]["message"]

    def test_non_object_data_is_corrupt(self) -> None:
        """Data that is not a JSON object cannot be an event payload: corrupt, via the broker."""
        dispatcher, _, dlq = _dispatcher()
        broker = SyncFakeBrokerAdapter()
        broker.deliver("in", Envelope.new(type="xsm.counter.INC", subject="x", data=[1, 2]))
        assert dispatcher.run_once_sync(broker, "in").dead_lettered == 1
        assert broker.pending("in") == 0
        assert "data not a JSON object" in dlq.all()[0].errors[0]["message"]

    def test_corrupt_record_keeps_the_redacted_envelope(self) -> None:
        """The record keeps the envelope for xsm dlq show, with secrets masked."""
        dispatcher, _, dlq = _dispatcher()
        dispatcher.handle(Envelope.new(type="xsm.counter.INC", subject="x", data=["password"]))
        dispatcher.handle(Envelope.new(type="xsm.x.Y", subject="x", data={"password": "p"}))
        assert dlq.all()[1].envelope["data"] == {"password": "***"}


class TestCausation:
    """Causation row: the inbound envelope is attached, so the outbox stamps the chain."""

    def test_outbox_envelopes_carry_causation_and_correlation(self) -> None:
        """Published envelopes point at the inbound one and share its correlation id."""
        outbox = MemoryOutboxStore()
        dispatcher, _, _ = _dispatcher(plugins=[OutboxPlugin(outbox, topic="ev")])
        cmd = _inc(correlationid="conv-1")
        dispatcher.handle(cmd)
        [row] = outbox.pending()
        assert row.envelope.causationid == cmd.id
        assert row.envelope.correlationid == "conv-1"
        assert row.envelope.subject == "c-1"
        assert row.envelope.data == {"count": 1}

    def test_store_key_is_the_subject(self) -> None:
        """The interpreter's store_key is the envelope subject."""
        keys: list[str] = []
        from xsm_celery import MachineLogic, create_machine

        machine = create_machine(
            {"id": "k", "initial": "a", "states": {"a": {"on": {"GO": {"actions": "see"}}}}},
            logic=MachineLogic(actions={"see": lambda i, c, e, a: keys.append(i.store_key)}),
        )
        dispatcher, _, _ = _dispatcher(types={"xsm.k.GO": machine})
        dispatcher.handle(Envelope.new(type="xsm.k.GO", subject="o-42"))
        assert keys == ["o-42"]


def test_key_for_changes_the_instance_key() -> None:
    """key_for= chooses the instance key (choreography prefixes the machine id)."""
    dispatcher, store, _ = _dispatcher(key_for=lambda env, m: f"{m.id}:{env.subject}")
    dispatcher.handle(_inc("o-1"))
    assert store.list_keys() == ["counter:o-1"]


def test_event_type_changes_the_event_name() -> None:
    """event_type= maps an integration event to the chart's event name."""
    dispatcher, store, _ = _dispatcher(
        types={"counter.bump": counter()}, event_type=lambda env: "INC"
    )
    dispatcher.handle(Envelope.new(type="counter.bump", subject="c-1", data={"n": 1}))
    assert _count(store) == 1


def test_instance_done_is_dead_lettered() -> None:
    """Troubleshooting: an event for an instance in a final state is dead-lettered."""
    dispatcher, _store, dlq = _dispatcher()
    dispatcher.handle(Envelope.new(type="xsm.counter.STOP", subject="c-1"))
    assert dispatcher.handle(_inc()).dead_lettered == 1
    assert dlq.all()[0].reason == "instance_done"


def test_handle_accepts_json_and_dicts() -> None:
    """handle() takes an Envelope, its JSON text, or its dict."""
    dispatcher, store, _ = _dispatcher()
    dispatcher.handle(_inc().to_json())
    dispatcher.handle(_inc().to_dict())
    assert _count(store) == 2


def test_run_forever_stops_on_the_event() -> None:
    """run_forever loops until stop_event is set and returns the totals."""
    dispatcher, store, _ = _dispatcher()
    broker = FakeBrokerAdapter()

    async def scenario() -> DispatchResult:
        stop = asyncio.Event()
        task = asyncio.create_task(dispatcher.run_forever(broker, "in", stop, idle_s=0.01))
        await broker.deliver("in", _inc())
        for _ in range(200):
            await asyncio.sleep(0.005)
            if _count(store):
                break
        stop.set()
        return await task

    assert asyncio.run(scenario()).processed == 1


def test_run_forever_sync_stops_on_the_event() -> None:
    """run_forever_sync loops in a thread until its threading.Event is set."""
    dispatcher, store, _ = _dispatcher()
    broker = SyncFakeBrokerAdapter()
    stop = threading.Event()
    box: list[DispatchResult] = []
    thread = threading.Thread(
        target=lambda: box.append(dispatcher.run_forever_sync(broker, "in", stop, idle_s=0.01))
    )
    thread.start()
    broker.deliver("in", _inc())
    deadline = time.monotonic() + 5
    while not _count(store) and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.set()
    thread.join(5)
    assert box[0].processed == 1


def test_bad_options_are_refused() -> None:
    """Nonsense limits and on_unknown values fail at construction."""
    with pytest.raises(ValueError, match="max_attempts"):
        _dispatcher(max_attempts=0)
    with pytest.raises(ValueError, match="on_unknown"):
        _dispatcher(on_unknown="drop")


def test_malformed_publish_meta_fails_loudly_at_construction() -> None:
    """A chart with an unusable meta.publish is refused when the dispatcher is built."""
    from xsm_celery import create_machine

    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "a", "meta": {"publish": 5}}}}},
        }
    )
    with pytest.raises(ValueError, match=r"meta\.publish"):
        _dispatcher(types={"xsm.m.GO": machine})


def test_seed_quick_start() -> None:
    """Seed 003 quick start: dedup, the publish and its causation, through the async loop."""
    broker = FakeBrokerAdapter()
    dispatcher = InboundDispatcher(
        MemoryStore(),
        {"xsm.order.PAY": order()},
        inbox=MemoryInbox(),
        plugins=[OutboxPlugin(broker, topic="order-events")],
    )
    cmd = Envelope.new(type="xsm.order.PAY", subject="o-42", data={"total": 99})

    async def scenario() -> DispatchResult:
        await broker.deliver("orders", cmd)
        await broker.deliver("orders", cmd)
        return await dispatcher.run_once(broker, "orders")

    result = asyncio.run(scenario())
    assert (result.processed, result.duplicates) == (1, 1)
    [paid] = broker.published_on("order-events")
    assert paid.type == "order.paid"
    assert paid.data == {"total": 99}
    assert paid.causationid == cmd.id
    assert paid.subject == "o-42"


class FailOnce:
    """A plugin whose first save fails inside the transaction, after the other writes."""

    def __init__(self) -> None:
        self.failed = False

    def on_persist(self, interp: Any, store: Any) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("disk full after the write")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_failed_save_leaves_no_receipt_and_the_retry_runs(kind: str, tmp_path: Any) -> None:
    """A save that fails after the inbox wrote its receipt is retried and processed once."""
    from xsm_celery.persistence import SQLiteInbox, SQLiteStore

    store: Any = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    inbox: Any = MemoryInbox() if kind == "memory" else SQLiteInbox(store)
    dispatcher, _, _ = _dispatcher(store=store, inbox=inbox, plugins=[FailOnce()])
    broker = SyncFakeBrokerAdapter()
    env = _inc()
    broker.deliver("in", env)
    assert dispatcher.run_once_sync(broker, "in").retried == 1
    assert dispatcher.run_once_sync(broker, "in").processed == 1
    broker.deliver("in", env)
    assert dispatcher.run_once_sync(broker, "in").duplicates == 1
    assert _count(store) == 1


class AckFails(SyncFakeBrokerAdapter):
    """A broker whose connection drops when the dispatcher settles a delivery."""

    def ack(self, delivery: Any) -> None:
        raise ConnectionError("connection reset while acking")

    def nack(self, delivery: Any, *, requeue: bool = True) -> None:
        raise ConnectionError("connection reset while nacking")


class AsyncAckFails(FakeBrokerAdapter):
    """The asyncio twin of AckFails."""

    async def ack(self, delivery: Any) -> None:
        raise ConnectionError("connection reset while acking")


def test_a_failing_ack_never_escapes_into_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    """Settlement errors are logged; the broker redelivers and the inbox absorbs the copy."""
    dispatcher, store, _ = _dispatcher(inbox=MemoryInbox())
    broker = AckFails()
    env = _inc()
    broker.deliver("in", env)
    broker.deliver("in", Envelope.new(type="xsm.counter.FAIL", subject="c-2"))
    with caplog.at_level(logging.ERROR, logger="xsm_celery.eda"):
        result = dispatcher.run_once_sync(broker, "in")
    assert (result.processed, result.retried) == (1, 1)
    assert "connection reset" in caplog.text
    assert dispatcher.handle(env).duplicates == 1
    assert _count(store) == 1


def test_a_failing_async_ack_never_escapes_into_the_loop() -> None:
    """The async loop logs a failing ack too."""
    dispatcher, store, _ = _dispatcher()
    broker = AsyncAckFails()

    async def scenario() -> DispatchResult:
        await broker.deliver("in", _inc())
        return await dispatcher.run_once(broker, "in")

    assert asyncio.run(scenario()).processed == 1
    assert _count(store) == 1
