"""Property tests: a relay of machines settles with one causation chain; redeliveries run once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.eda import Envelope, OutboxPlugin, SyncFakeBrokerAdapter
from xsm_celery.engine import Machine, create_machine
from xsm_celery.patterns import ChoreographyRouter
from xsm_celery.persistence import MemoryInbox, MemoryStore


def runner(index: int) -> Machine:
    """Machine ``m<index>``: one GO moves it to done and publishes ``leg<index>.done``."""
    return create_machine(
        {
            "id": f"m{index}",
            "initial": "ready",
            "states": {
                "ready": {
                    "on": {"GO": {"target": "done", "meta": {"publish": f"leg{index}.done"}}}
                },
                "done": {"type": "final"},
            },
        }
    )


def relay(length: int) -> dict[str, object]:
    """Routes start -> m0, leg0.done -> m1, ... : a chain of ``length`` machines."""
    machines = [runner(i) for i in range(length)]
    routes: dict[str, object] = {"start": (machines[0], "GO")}
    for index in range(1, length):
        routes[f"leg{index - 1}.done"] = (machines[index], "GO")
    return routes


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=4))
def test_a_relay_settles_in_order_with_one_chain(length: int, redeliveries: int) -> None:
    """Every leg runs once, each event is caused by the previous one, all share one correlation."""
    bus = SyncFakeBrokerAdapter()
    store = MemoryStore()
    router = ChoreographyRouter(
        store, relay(length), plugins=[OutboxPlugin(bus, topic="events")], inbox=MemoryInbox()
    )
    start = Envelope.new(type="start", subject="run-1", correlationid="corr")
    for _ in range(redeliveries):
        bus.publish("events", start)
    result = router.run_until_quiet_sync(bus, max_rounds=length + 2)
    assert result.processed == length
    assert result.duplicates == redeliveries - 1
    legs = [e for e in bus.published_on("events") if e.type != "start"]
    assert [e.type for e in legs] == [f"leg{i}.done" for i in range(length)]
    causes = [start.id] + [e.id for e in legs[:-1]]
    assert [e.causationid for e in legs] == causes
    assert {e.correlationid for e in legs} == {"corr"}
    assert sorted(store.list_keys()) == sorted(f"m{i}:run-1" for i in range(length))
