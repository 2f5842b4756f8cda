"""send_threadsafe(): events from other threads run on the owner's thread, none lost."""

from __future__ import annotations

import threading
from typing import Any

from xsm_celery import MachineLogic, SimulatedClock, SyncInterpreter, create_machine


def counter() -> SyncInterpreter:
    """A machine counting ADD events, remembering which thread ran each action."""
    config = {
        "id": "m",
        "initial": "a",
        "context": {"seen": []},
        "states": {"a": {"on": {"ADD": {"actions": "add"}}}},
    }

    def add(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        ctx["seen"].append((event.payload["sender"], event.payload["n"], threading.get_ident()))

    return SyncInterpreter(create_machine(config, logic=MachineLogic(actions={"add": add}))).start()


def test_events_from_many_threads_run_on_the_owner_in_per_thread_order() -> None:
    """8 threads x 200 events: all delivered, on the owner's thread, FIFO per sender."""
    interp = counter()
    owner = threading.get_ident()
    barrier = threading.Barrier(8)

    def produce(sender: int) -> None:
        barrier.wait()
        for n in range(200):
            interp.send_threadsafe("ADD", sender=sender, n=n)

    threads = [threading.Thread(target=produce, args=(s,)) for s in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert interp.context["seen"] == []
    interp.tick()
    seen = interp.context["seen"]
    assert len(seen) == 1600
    assert {ident for _, _, ident in seen} == {owner}
    for sender in range(8):
        assert [n for s, n, _ in seen if s == sender] == list(range(200))


def test_mailbox_drains_before_the_owners_next_event() -> None:
    """Posted events run ahead of the event the owner sends next."""
    interp = counter()
    interp.send_threadsafe("ADD", sender="thread", n=1)
    interp.send("ADD", sender="owner", n=2)
    assert [s for s, _, _ in interp.context["seen"]] == ["thread", "owner"]


def test_clock_increment_drains_mailboxes_of_its_interpreters() -> None:
    """SimulatedClock.increment(0) delivers mailboxes of every interpreter on that clock."""
    config = {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}}
    clock = SimulatedClock()
    machine = create_machine(config)
    first = SyncInterpreter(machine, clock=clock).start()
    second = SyncInterpreter(machine, clock=clock).start()
    thread = threading.Thread(
        target=lambda: (first.send_threadsafe("GO"), second.send_threadsafe("GO"))
    )
    thread.start()
    thread.join()
    clock.increment(0)
    assert first.value == second.value == "b"


def test_send_threadsafe_to_a_stopped_interpreter_is_dropped() -> None:
    """Posting after stop() drops the event (with a warning), never raising in the producer."""
    interp = counter()
    interp.stop()
    interp.send_threadsafe("ADD", sender="late", n=0)
    interp.tick()
    assert interp.context["seen"] == []


def test_events_posted_before_start_run_after_start() -> None:
    """The mailbox accepts events before start(); they run at the first step after it."""
    config = {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}}
    interp = SyncInterpreter(create_machine(config))
    interp.send_threadsafe("GO")
    interp.start()
    interp.tick()
    assert interp.value == "b"
