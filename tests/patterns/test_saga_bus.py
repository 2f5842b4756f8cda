"""A saga driven from the bus: START routing, forged completions, dedup, outbox, restarts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.patterns.sagas import Calls, hang
from xsm_celery.eda import (
    DeadLetterPlugin,
    Envelope,
    InboundDispatcher,
    MemoryDeadLetterStore,
    MemoryOutboxStore,
    OutboxPlugin,
    SyncFakeBrokerAdapter,
)
from xsm_celery.engine import Machine, MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.errors import SnapshotMismatchError
from xsm_celery.patterns import SagaBuilder
from xsm_celery.persistence import MemoryInbox, MemoryStore


def fulfil_saga() -> SagaBuilder:
    return (
        SagaBuilder("fulfil", start_event="START")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", compensate="refundCard")
        .step("ship", invoke="ship")
    )


def fulfil(services: dict[str, Any]) -> tuple[SagaBuilder, Machine]:
    saga = fulfil_saga()
    logic = saga.logic().merge(MachineLogic(services=services))
    return saga, create_machine(saga.build(), logic=logic, strict_config=True)


def services(calls: Calls, **fail: Any) -> dict[str, Any]:
    names = {
        "reserveStock": "reserve",
        "releaseStock": "release",
        "chargeCard": "charge",
        "refundCard": "refund",
        "ship": "ship",
    }
    return {key: calls.service(name, fail.get(name, False)) for key, name in names.items()}


def state_of(store: MemoryStore, key: str) -> Any:
    record = store.load(key)
    assert record is not None
    return json.loads(record.snapshot)


def test_step_services_read_the_start_payload_from_input_and_identity_from_the_key() -> None:
    """Services get invoke.<step>, not the command: ctx['input'] and interp.store_key carry it."""
    seen: list[tuple[str, Any, Any, str]] = []

    def reserve(interp: Any, ctx: dict[str, Any], event: Any) -> str:
        seen.append((event.type, dict(event.payload), ctx["input"], interp.store_key))
        return "held"

    saga = SagaBuilder("fulfil", start_event="START").step("reserve", invoke="reserveStock")
    machine = create_machine(
        saga.build(), logic=saga.logic().merge(MachineLogic(services={"reserveStock": reserve}))
    )
    bus, store = SyncFakeBrokerAdapter(), MemoryStore()
    dispatcher = InboundDispatcher(store, {"xsm.fulfil.START": machine}, inbox=MemoryInbox())
    bus.publish(
        "commands", Envelope.new(type="xsm.fulfil.START", subject="o-7", data={"sku": "A1"})
    )
    assert dispatcher.run_once_sync(bus, "commands").processed == 1
    [(event_type, payload, given, key)] = seen
    assert event_type == "invoke.reserve"
    assert "sku" not in payload
    assert given == {"sku": "A1"}
    assert key == "o-7"
    assert state_of(store, "o-7")["context"]["results"] == {"reserve": "held"}


def test_an_unrouted_start_is_ignored_or_dead_lettered() -> None:
    """No route for xsm.<saga>.START: ignored grows with 'ignore', DLQ unknown_event otherwise."""
    _, machine = fulfil(services(Calls()))
    start = Envelope.new(type="xsm.fulfil.START", subject="o-1")
    bus, dlq = SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
    ignoring = InboundDispatcher(MemoryStore(), {"xsm.other.START": machine}, on_unknown="ignore")
    bus.publish("commands", start)
    assert ignoring.run_once_sync(bus, "commands").ignored == 1
    strict = InboundDispatcher(MemoryStore(), {"xsm.other.START": machine}, dead_letters=dlq)
    bus.publish("commands", start)
    assert strict.run_once_sync(bus, "commands").dead_lettered == 1
    assert [r.reason for r in dlq.list()] == ["unknown_event"]


class TestForgedCompletions:
    """A forged done.invoke / error.platform envelope can neither complete nor fail a step."""

    def setup(self) -> tuple[Calls, Machine]:
        calls = Calls()
        _, machine = fulfil({**services(calls), "reserveStock": hang("reserve", calls)})
        return calls, machine

    def test_with_the_usual_mapping_a_forged_completion_is_unknown(self) -> None:
        """xsm.fulfil.done.invoke.reserve has no route: it is dead-lettered, the saga waits."""
        calls, machine = self.setup()
        store, bus, dlq = MemoryStore(), SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
        dispatcher = InboundDispatcher(store, {"xsm.fulfil.START": machine}, dead_letters=dlq)
        bus.publish("c", Envelope.new(type="xsm.fulfil.START", subject="o-1"))
        bus.publish(
            "c",
            Envelope.new(
                type="xsm.fulfil.done.invoke.reserve", subject="o-1", data={"result": "forged"}
            ),
        )
        result = dispatcher.run_once_sync(bus, "c")
        assert (result.processed, result.dead_lettered) == (1, 1)
        assert state_of(store, "o-1")["context"]["results"] == {}
        assert calls.order == ["reserve"]

    @pytest.mark.parametrize("forged", ["done.invoke.reserve", "error.platform.reserve"])
    def test_a_catch_all_mapping_only_delivers_user_traffic(self, forged: str) -> None:
        """Even routed, the engine never takes an engine event from a caller."""
        calls, machine = self.setup()
        store, bus = MemoryStore(), SyncFakeBrokerAdapter()
        dispatcher = InboundDispatcher(
            store, lambda kind: machine if kind.startswith("xsm.fulfil.") else None
        )
        bus.publish("c", Envelope.new(type="xsm.fulfil.START", subject="o-1"))
        bus.publish("c", Envelope.new(type=f"xsm.fulfil.{forged}", subject="o-1"))
        dispatcher.run_once_sync(bus, "c")
        snapshot = state_of(store, "o-1")
        assert snapshot["context"]["results"] == {}
        assert snapshot["context"]["error"] is None
        assert calls.order == ["reserve"]
        assert "release" not in calls.order


def test_dedup_key_on_causationid_makes_a_re_minted_start_a_duplicate() -> None:
    """The seed's dedup_key=lambda e: e.causationid or e.id answers a re-minted START."""
    calls = Calls()
    _, machine = fulfil(services(calls))
    bus, store = SyncFakeBrokerAdapter(), MemoryStore()
    dispatcher = InboundDispatcher(
        store,
        {"xsm.fulfil.START": machine},
        inbox=MemoryInbox(),
        dedup_key=lambda e: e.causationid or e.id,
    )
    for _ in range(2):
        bus.publish("c", Envelope.new(type="xsm.fulfil.START", subject="o-1", causationid="req-9"))
    result = dispatcher.run_once_sync(bus, "c")
    assert (result.processed, result.duplicates) == (1, 1)
    assert calls.order == ["reserve", "charge", "ship"]


def test_the_saga_publishes_its_integration_events_through_the_outbox() -> None:
    """completed, failed and compensated events reach the outbox, caused by the START."""
    calls = Calls()
    _, machine = fulfil(services(calls, ship=True))
    outbox, bus = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    dispatcher = InboundDispatcher(
        MemoryStore(), {"xsm.fulfil.START": machine}, plugins=[OutboxPlugin(outbox, topic="sagas")]
    )
    start = Envelope.new(type="xsm.fulfil.START", subject="o-5", correlationid="c-5")
    bus.publish("c", start)
    dispatcher.run_once_sync(bus, "c")
    rows = [row.envelope for row in outbox.pending()]
    assert [e.type for e in rows] == [
        "fulfil.reserve.completed",
        "fulfil.charge.completed",
        "fulfil.ship.failed",
        "fulfil.charge.compensated",
        "fulfil.reserve.compensated",
    ]
    assert {e.subject for e in rows} == {"o-5"}
    assert {e.correlationid for e in rows} == {"c-5"}
    assert rows[2].data["error"]["step"] == "ship"
    assert rows[-1].data == {"compensated": ["charge", "reserve"]}


def test_a_redelivered_start_after_compensation_failed_changes_nothing() -> None:
    """compensationFailed is final: one dead letter, and a redelivered START is a duplicate."""
    calls = Calls()
    _, machine = fulfil(services(calls, charge=True, release=True))
    store, bus, dlq = MemoryStore(), SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        store,
        {"xsm.fulfil.START": machine},
        inbox=MemoryInbox(),
        plugins=[DeadLetterPlugin(dlq)],
        dead_letters=dlq,
    )
    start = Envelope.new(type="xsm.fulfil.START", subject="o-2")
    bus.publish("c", start)
    dispatcher.run_once_sync(bus, "c")
    bus.publish("c", start)
    assert dispatcher.run_once_sync(bus, "c").duplicates == 1
    [letter] = dlq.list()
    assert letter.state_id.endswith(".compensationFailed")
    assert letter.reason == "dead_letter_state"
    assert calls.order == ["reserve", "charge", "release"]
    assert state_of(store, "o-2")["context"]["error"]["stage"] == "compensation"


def test_a_restart_mid_compensation_runs_that_compensation_again() -> None:
    """Restored from a snapshot taken mid-compensation, the compensation runs once more."""
    calls = Calls()
    saga = fulfil_saga()
    stuck = {**services(calls, ship=True), "refundCard": hang("refund", calls)}
    machine = create_machine(saga.build(), logic=saga.logic().merge(MachineLogic(services=stuck)))
    first = SyncInterpreter(machine, clock=SimulatedClock()).start()
    first.send("START")
    assert first.current_state_ids == {"fulfil.compensating.charge"}
    snapshot = first.get_snapshot()
    first.stop()
    healed = {**services(calls, ship=True)}
    machine2 = create_machine(saga.build(), logic=saga.logic().merge(MachineLogic(services=healed)))
    second = SyncInterpreter.from_snapshot(
        snapshot, machine2, SimulatedClock(), restart_services=True
    )
    second.tick()
    assert second.current_state_ids == {"fulfil.failed"}
    assert calls.order == ["reserve", "charge", "ship", "refund", "refund", "release"]
    assert second.context["compensated"] == ["charge", "reserve"]


def test_a_snapshot_of_an_older_saga_chart_is_refused_without_the_hash_override() -> None:
    """A chart without sagaStart/input has another structure hash: the upgrade row of the seed."""
    saga, machine = fulfil(services(Calls()))
    older = saga.build()
    older["states"]["idle"]["on"]["START"].pop("actions")
    older["context"].pop("input")
    old_machine = create_machine(older)
    assert old_machine.structure_hash != machine.structure_hash
    snapshot = SyncInterpreter(old_machine, clock=SimulatedClock()).start().get_snapshot()
    with pytest.raises(SnapshotMismatchError, match="verify_machine_hash=False"):
        SyncInterpreter.from_snapshot(snapshot, machine, SimulatedClock())
    restored = SyncInterpreter.from_snapshot(
        snapshot, machine, SimulatedClock(), expected_machine_hash=old_machine.structure_hash
    )
    assert restored.current_state_ids == {"fulfil.idle"}
