"""ChoreographyRouter: routes, instance keys, unrouted types, dedup_key and run_until_quiet."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from xsm_celery.eda import (
    Envelope,
    FakeBrokerAdapter,
    InboundDispatcher,
    MemoryDeadLetterStore,
    OutboxPlugin,
    SyncFakeBrokerAdapter,
)
from xsm_celery.engine import Machine, MachineLogic, create_machine
from xsm_celery.errors import ChoreographyUnsettledError, XsmError
from xsm_celery.patterns import ChoreographyRouter, Route
from xsm_celery.persistence import MemoryInbox, MemoryStore


def order_machine() -> Machine:
    return create_machine(
        {
            "id": "order",
            "initial": "new",
            "states": {
                "new": {
                    "on": {"PLACE": {"target": "awaiting", "meta": {"publish": "order.placed"}}}
                },
                "awaiting": {
                    "on": {"PAID": {"target": "completed", "meta": {"publish": "order.completed"}}}
                },
                "completed": {"type": "final"},
            },
        }
    )


def payment_machine() -> Machine:
    return create_machine(
        {
            "id": "payment",
            "initial": "idle",
            "states": {
                "idle": {
                    "on": {"CHARGE": {"target": "paid", "meta": {"publish": "payment.captured"}}}
                },
                "paid": {"type": "final"},
            },
        }
    )


def ping_pong() -> tuple[Machine, Machine]:
    """Two machines that answer each other's event for ever."""

    def player(name: str, sends: str) -> Machine:
        return create_machine(
            {
                "id": name,
                "initial": "playing",
                "states": {
                    "playing": {
                        "on": {
                            "HIT": {
                                "target": "playing",
                                "reenter": True,
                                "meta": {"publish": sends},
                            }
                        }
                    },
                },
            }
        )

    return player("ping", "ping.hit"), player("pong", "pong.hit")


def routes() -> dict[str, Any]:
    order, payment = order_machine(), payment_machine()
    return {
        "xsm.order.PLACE": order,
        "order.placed": (payment, "CHARGE"),
        "payment.captured": Route(order, "PAID"),
    }


def test_the_whole_conversation_settles_with_one_causation_chain_sync() -> None:
    """Sync twin of the seed example: each event is caused by the previous, one correlation."""
    bus, store = SyncFakeBrokerAdapter(), MemoryStore()
    router = ChoreographyRouter(
        store, routes(), plugins=[OutboxPlugin(bus, topic="events")], inbox=MemoryInbox()
    )
    cmd = Envelope.new(type="xsm.order.PLACE", subject="o-1", correlationid="c-1")
    bus.publish("events", cmd)
    result = router.run_until_quiet_sync(bus)
    chain = {e.type: e for e in bus.published_on("events") if e.id != cmd.id}
    assert set(chain) == {"order.placed", "payment.captured", "order.completed"}
    assert chain["order.placed"].causationid == cmd.id
    assert chain["payment.captured"].causationid == chain["order.placed"].id
    assert chain["order.completed"].causationid == chain["payment.captured"].id
    assert {e.correlationid for e in chain.values()} == {"c-1"}
    assert result.processed == 3
    assert result.ignored == 1


def test_instances_are_keyed_machine_id_colon_subject() -> None:
    """Two machines share the business key o-1 without sharing an instance."""
    bus, store = SyncFakeBrokerAdapter(), MemoryStore()
    router = ChoreographyRouter(store, routes(), plugins=[OutboxPlugin(bus, topic="events")])
    bus.publish("events", Envelope.new(type="xsm.order.PLACE", subject="o-1"))
    router.run_until_quiet_sync(bus)
    assert sorted(store.list_keys()) == ["order:o-1", "payment:o-1"]
    assert store.load("o-1") is None


def test_unrouted_types_are_acked_and_ignored_by_default() -> None:
    """A shared bus carries other services' events: they are acked, counted as ignored."""
    bus = SyncFakeBrokerAdapter()
    dlq = MemoryDeadLetterStore()
    router = ChoreographyRouter(MemoryStore(), routes(), dead_letters=dlq)
    bus.publish("events", Envelope.new(type="billing.invoiced", subject="o-9"))
    result = router.run_until_quiet_sync(bus)
    assert (result.ignored, result.dead_lettered) == (1, 0)
    assert dlq.list() == []
    assert router.run_once_sync(bus, "events").total == 0


def test_unrouted_types_can_be_dead_lettered_instead() -> None:
    """With on_unknown='dead_letter' an unrouted type is DLQ reason unknown_event."""
    bus, dlq = SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
    router = ChoreographyRouter(MemoryStore(), routes(), on_unknown="dead_letter", dead_letters=dlq)
    bus.publish("events", Envelope.new(type="billing.invoiced", subject="o-9"))
    assert router.run_until_quiet_sync(bus).dead_lettered == 1
    [letter] = dlq.list()
    assert letter.reason == "unknown_event"


def test_a_cycle_between_routes_stops_after_max_rounds() -> None:
    """Two routes publishing at each other raise the seed's RuntimeError after max_rounds."""
    ping, pong = ping_pong()
    bus = SyncFakeBrokerAdapter()
    router = ChoreographyRouter(
        MemoryStore(),
        {"serve": (ping, "HIT"), "ping.hit": (pong, "HIT"), "pong.hit": (ping, "HIT")},
        plugins=[OutboxPlugin(bus, topic="events")],
    )
    bus.publish("events", Envelope.new(type="serve", subject="match-1"))
    with pytest.raises(
        RuntimeError,
        match=r"choreography did not settle in 7 rounds \(an event "
        r"loop between machines\?\)",
    ) as caught:
        router.run_until_quiet_sync(bus, max_rounds=7)
    assert isinstance(caught.value, ChoreographyUnsettledError)
    assert isinstance(caught.value, XsmError)
    assert caught.value.rounds == 7


def test_a_cycle_is_caught_by_the_async_loop_too() -> None:
    """The async run_until_quiet stops the same cycle with the same error."""
    ping, pong = ping_pong()
    bus = FakeBrokerAdapter()
    router = ChoreographyRouter(
        MemoryStore(),
        {"serve": (ping, "HIT"), "ping.hit": (pong, "HIT"), "pong.hit": (ping, "HIT")},
        plugins=[OutboxPlugin(bus, topic="events")],
    )

    async def main() -> None:
        await bus.deliver("events", Envelope.new(type="serve", subject="m-2"))
        await router.run_until_quiet(bus, max_rounds=5)

    with pytest.raises(ChoreographyUnsettledError, match="did not settle in 5 rounds"):
        asyncio.run(main())


@pytest.mark.parametrize("rounds", [0, -1, 1.5, True, None])
def test_max_rounds_must_be_positive(rounds: Any) -> None:
    """run_until_quiet(max_rounds=0) is refused with the table's message."""
    router = ChoreographyRouter(MemoryStore(), routes())
    with pytest.raises(ValueError, match="max_rounds must be >= 1"):
        router.run_until_quiet_sync(SyncFakeBrokerAdapter(), max_rounds=rounds)


def test_a_quiet_bus_returns_after_one_round() -> None:
    """An empty bus is quiet at once, even with max_rounds=1."""
    router = ChoreographyRouter(MemoryStore(), routes())
    assert router.run_until_quiet_sync(SyncFakeBrokerAdapter(), max_rounds=1).total == 0


def test_dedup_key_on_causationid_absorbs_a_re_minted_event() -> None:
    """With dedup_key=causationid, the same upstream fact re-minted with a new id runs once."""
    counter = create_machine(
        {
            "id": "ledger",
            "initial": "open",
            "context": {"n": 0},
            "states": {"open": {"on": {"CREDIT": {"actions": "count"}}}},
        },
        logic=MachineLogic(actions={"count": lambda i, ctx, e, a: ctx.update(n=ctx["n"] + 1)}),
    )

    def run(dedup: Any) -> int:
        store, bus = MemoryStore(), SyncFakeBrokerAdapter()
        options = {"dedup_key": dedup} if dedup else {}
        router = ChoreographyRouter(
            store, {"payment.captured": (counter, "CREDIT")}, inbox=MemoryInbox(), **options
        )
        for _ in range(2):  # the upstream relay re-mints the same fact with a new id
            bus.publish(
                "events",
                Envelope.new(type="payment.captured", subject="a-1", causationid="cmd-1"),
            )
        router.run_until_quiet_sync(bus)
        record = store.load("ledger:a-1")
        assert record is not None
        return int(json.loads(record.snapshot)["context"]["n"])

    assert run(None) == 2
    assert run(lambda e: e.causationid or e.id) == 1


def test_a_redelivered_envelope_is_a_duplicate() -> None:
    """The inbox answers a redelivery of the same envelope; the machine does not move twice."""
    bus = SyncFakeBrokerAdapter()
    router = ChoreographyRouter(MemoryStore(), routes(), inbox=MemoryInbox())
    cmd = Envelope.new(type="xsm.order.PLACE", subject="o-3")
    bus.publish("events", cmd)
    bus.publish("events", cmd)
    result = router.run_until_quiet_sync(bus)
    assert (result.processed, result.duplicates) == (1, 1)


def test_route_without_event_keeps_the_default_mapping() -> None:
    """Route(machine) sends xsm.<machine>.<EVENT> as EVENT, like the dispatcher's default."""
    bus, store = SyncFakeBrokerAdapter(), MemoryStore()
    router = ChoreographyRouter(store, {"xsm.order.PLACE": Route(order_machine())})
    bus.publish("events", Envelope.new(type="xsm.order.PLACE", subject="o-4"))
    assert router.run_until_quiet_sync(bus).processed == 1
    record = store.load("order:o-4")
    assert record is not None
    assert '"awaiting"' in record.snapshot


def test_default_topics_are_the_outbox_plugins_topics() -> None:
    """Without topics=, the router drains the topics its OutboxPlugins publish to."""
    bus = SyncFakeBrokerAdapter()
    router = ChoreographyRouter(
        MemoryStore(), routes(), plugins=[OutboxPlugin(bus, topic="order-events")]
    )
    assert router.topics() == ["order-events"]
    assert ChoreographyRouter(MemoryStore(), routes()).topics() == ["events"]
    with pytest.raises(ValueError, match="topics must be a topic name"):
        router.run_until_quiet_sync(bus, topics=[])


def test_router_forwards_dispatcher_attributes() -> None:
    """A router goes wherever a dispatcher does: its options and loops are the dispatcher's."""
    inbox = MemoryInbox()
    router = ChoreographyRouter(MemoryStore(), routes(), inbox=inbox, max_attempts=3)
    assert isinstance(router.dispatcher, InboundDispatcher)
    assert router.inbox is inbox
    assert router.max_attempts == 3
    assert callable(router.run_forever_sync)


@pytest.mark.parametrize("option", ["machine_for_type", "event_type", "key_for"])
def test_options_the_router_computes_are_refused(option: str) -> None:
    """machine_for_type / event_type / key_for come from the routes, so passing one is an error."""
    with pytest.raises(TypeError, match=f"computes {option} from its routes"):
        ChoreographyRouter(MemoryStore(), routes(), **{option: lambda *a: None})


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("order", TypeError, "must be a Machine, a \\(machine, 'EVENT'\\) pair"),
        ((None, "PAID"), TypeError, "must be a Machine"),
        ((order_machine(), ""), ValueError, "non-empty chart event name"),
        ((order_machine(), "done.invoke.reserve"), ValueError, "engine-reserved event name"),
        ((order_machine(), "error.platform.x"), ValueError, "engine-reserved event name"),
    ],
)
def test_bad_routes_are_refused(value: Any, error: type[Exception], message: str) -> None:
    """A route that is not a machine, or maps to an engine event, is refused up front."""
    with pytest.raises(error, match=message):
        ChoreographyRouter(MemoryStore(), {"order.placed": value})


def test_a_malformed_publication_in_a_routed_chart_is_refused_at_construction() -> None:
    """A bad meta.publish fails when the router is built, not on the first delivery."""
    bad = create_machine(
        {"id": "bad", "initial": "a", "states": {"a": {"on": {"GO": {"meta": {"publish": 5}}}}}}
    )
    with pytest.raises(ValueError, match="is not a publication"):
        ChoreographyRouter(MemoryStore(), {"go": (bad, "GO")})
