"""The seed's "What was pinned" rows for dead letters, one test per row."""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc
import weakref
from typing import Any

from tests.patterns.charts import cycling_chart, retry_chart
from xsm_celery.engine import MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.patterns import (
    ERRORS_CONTEXT_KEY,
    DeadLetter,
    DeadLetterPlugin,
    DeadLetterStore,
    RetryPolicy,
)


def fail_with_key(interp: Any, ctx: dict[str, Any], event: Any) -> None:
    raise ConnectionError(
        f"gateway down for {ctx.get('key', '?')} api_key={ctx.get('api_key', '')}"
    )


def retry_logic(max_attempts: int = 3, work: Any = fail_with_key) -> MachineLogic:
    policy = RetryPolicy(max_attempts=max_attempts, base_ms=100, jitter="none")
    return policy.logic().merge(MachineLogic(services={"work": work}))


def test_three_failures_across_three_persisted_blocks() -> None:
    """Each attempt in a fresh interpreter restored from the last snapshot: one full record at the end."""
    store = DeadLetterStore()
    plugin = DeadLetterPlugin(store)
    machine = create_machine(retry_chart(api_key="sk-live-123456"), logic=retry_logic())
    clock = SimulatedClock()

    first = SyncInterpreter(machine, clock=clock).use(plugin).start()  # the web request
    saved = first.get_snapshot()
    first.stop()
    del first
    for _ in range(3):  # two scanner wakes that fail again, then the one that gives up
        block = SyncInterpreter.from_snapshot(saved, machine, clock=clock).use(plugin)
        if block.status == "not_started":
            block.start()
        clock.increment(10_000)
        saved = block.get_snapshot()
        block.stop()
    [record] = store.all()
    assert record.state_id == "job.deadLettered"
    assert record.attempts == 3
    assert [e["type"] for e in record.errors] == ["ConnectionError"] * 3
    assert all(e["message"].endswith("api_key=***") for e in record.errors)
    assert "sk-live-123456" not in record.to_json()


def test_shared_plugin_under_sixteen_threads() -> None:
    """One plugin, 16 threads x 200 machines all with id 'order': each record holds only its own errors."""
    store = DeadLetterStore()
    plugin = DeadLetterPlugin(store)
    chart = retry_chart()
    chart["id"] = "order"
    chart["initial"] = "idle"
    chart["states"]["idle"] = {"on": {"GO": "attempting"}}
    machine = create_machine(chart, logic=retry_logic(max_attempts=2))
    barrier = threading.Barrier(16)
    failures: list[str] = []

    def worker(thread: int) -> None:
        clock = SimulatedClock()
        barrier.wait()
        for cycle in range(200):
            key = f"{thread}-{cycle}"
            interp = SyncInterpreter(machine, clock=clock).use(plugin)
            interp.start()
            interp.context["key"] = key
            interp.send("GO")
            clock.increment(10_000)
            clock.increment(10_000)
            if not interp.matches("order.deadLettered"):
                failures.append(key)
            interp.stop()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert failures == []
    records = store.all()
    assert len(records) == 16 * 200
    for record in records:
        assert record.machine_id == "order"
        assert len(record.errors) == 2
        key = record.snapshot["context"]["key"]
        assert all(f"down for {key} " in e["message"] for e in record.errors), (key, record.errors)
    assert len({r.snapshot["context"]["key"] for r in records}) == 16 * 200


def test_initial_dead_letter_state_writes_nothing() -> None:
    """Starting in a dead-letter state is not an event step: no record."""
    chart = {
        "id": "m",
        "initial": "dead",
        "states": {"dead": {"tags": ["dead-letter"], "on": {"PING": {"actions": "noop"}}}},
    }
    store = DeadLetterStore()
    logic = MachineLogic(actions={"noop": lambda *a: None})
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic)).use(DeadLetterPlugin(store)).start()
    )
    interp.send("PING")
    interp.send("UNKNOWN")
    assert store.all() == []


def test_two_dead_letter_states_one_record_per_entry() -> None:
    """Two dead-letter states; entering and re-entering them writes one record per entry."""
    chart = {
        "id": "m",
        "initial": "idle",
        "states": {
            "idle": {"on": {"POISON": "poisoned", "EXPIRE": "expired"}},
            "poisoned": {"tags": ["dead-letter"], "on": {"RETRY": "idle", "NOOP": {}}},
            "expired": {"tags": ["dead-letter"], "on": {"RETRY": "idle"}},
        },
    }
    store = DeadLetterStore()
    interp = SyncInterpreter(create_machine(chart)).use(DeadLetterPlugin(store)).start()
    for event in ("POISON", "NOOP", "RETRY", "POISON", "RETRY", "EXPIRE"):
        interp.send(event)
    assert [r.state_id for r in store.all()] == ["m.poisoned", "m.poisoned", "m.expired"]


def test_plugin_on_a_child_actor() -> None:
    """A plugin attached to a child interpreter writes the child's records under its own id."""
    store = DeadLetterStore()
    parent_store = DeadLetterStore()
    machine = create_machine(retry_chart(), logic=retry_logic(max_attempts=1))
    clock = SimulatedClock()
    parent_chart = {
        "id": "parent",
        "initial": "running",
        "states": {"running": {"on": {"GIVE_UP": "dead"}}, "dead": {"tags": ["dead-letter"]}},
    }
    parent = (
        SyncInterpreter(create_machine(parent_chart), clock=clock)
        .use(DeadLetterPlugin(parent_store))
        .start()
    )
    child = SyncInterpreter(machine, clock=clock).use(DeadLetterPlugin(store)).start()
    clock.increment(10_000)
    assert [r.machine_id for r in store.all()] == [child.id]
    assert parent_store.all() == []
    parent.send("GIVE_UP")
    assert [r.machine_id for r in parent_store.all()] == ["parent"]


def test_blocking_sink_blocks_the_step() -> None:
    """send() returns only after a blocking sink returns."""
    gate = threading.Event()
    entered = threading.Event()
    seen: list[DeadLetter] = []

    def sink(record: DeadLetter) -> None:
        entered.set()
        gate.wait(10)
        seen.append(record)

    chart = {
        "id": "m",
        "initial": "idle",
        "states": {"idle": {"on": {"FAIL": "dead"}}, "dead": {"tags": ["dead-letter"]}},
    }
    interp = SyncInterpreter(create_machine(chart)).use(DeadLetterPlugin(sink)).start()
    returned = threading.Event()

    def send() -> None:
        interp.send("FAIL")
        returned.set()

    worker = threading.Thread(target=send)
    worker.start()
    assert entered.wait(10)
    time.sleep(0.05)
    assert not returned.is_set()
    gate.set()
    worker.join(10)
    assert returned.is_set()
    assert len(seen) == 1


def test_chain_is_per_machine_across_parallel_regions() -> None:
    """Region A's error appears in the record written when region B dead-letters."""
    chart = {
        "id": "m",
        "type": "parallel",
        "states": {
            "a": {
                "initial": "work",
                "states": {
                    "work": {"invoke": {"src": "failA", "onError": "failed"}},
                    "failed": {},
                },
            },
            "b": {
                "initial": "idle",
                "states": {
                    "idle": {"on": {"GO": "work"}},
                    "work": {"invoke": {"src": "failB", "onError": "dead"}},
                    "dead": {"tags": ["dead-letter"]},
                },
            },
        },
    }

    def fail_a(interp: Any, ctx: Any, event: Any) -> None:
        raise ValueError("region a broke")

    def fail_b(interp: Any, ctx: Any, event: Any) -> None:
        raise ValueError("region b broke")

    store = DeadLetterStore()
    logic = MachineLogic(services={"failA": fail_a, "failB": fail_b})
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic)).use(DeadLetterPlugin(store)).start()
    )
    interp.send("GO")
    [record] = store.all()
    assert record.state_id == "m.b.dead"
    assert [e["message"] for e in record.errors] == ["region a broke", "region b broke"]


def test_ten_thousand_retry_cycles_do_not_grow() -> None:
    """10,000 fail-retry-succeed cycles on one machine: growth N/2 -> N under 64 KB, no new threads."""
    outcomes = {"n": 0}

    def work(interp: Any, ctx: Any, event: Any) -> str:
        outcomes["n"] += 1
        if outcomes["n"] % 2:
            raise ConnectionError("flaky " + "x" * 200)
        return "ok"

    machine = create_machine(cycling_chart(), logic=retry_logic(max_attempts=3, work=work))
    clock = SimulatedClock()
    interp = SyncInterpreter(machine, clock=clock).use(DeadLetterPlugin(DeadLetterStore())).start()
    threads = threading.active_count()

    def cycles(count: int) -> None:
        for _ in range(count):
            clock.increment(100)
            assert interp.matches("job.done")
            interp.send("AGAIN")

    cycles(200)  # warm caches before measuring
    tracemalloc.start()
    try:
        cycles(5_000)
        gc.collect()
        half = tracemalloc.get_traced_memory()[0]
        cycles(5_000)
        gc.collect()
        full = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert full - half < 64 * 1024
    assert threading.active_count() == threads
    assert ERRORS_CONTEXT_KEY in interp.context  # the last attempt failed and is pending


def test_never_stopped_interpreters_leak_nothing() -> None:
    """10,000 interpreters that are dropped without stop(): the shared plugin keeps none alive."""
    plugin = DeadLetterPlugin(DeadLetterStore())
    machine = create_machine(retry_chart(), logic=retry_logic(max_attempts=5))
    refs = []
    for n in range(10_000):
        interp = SyncInterpreter(machine, clock=SimulatedClock()).use(plugin).start()
        if n % 1000 == 0:
            refs.append(weakref.ref(interp))
        del interp
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert len(plugin._entered) == 0


def test_globally_registered_plugin_reaches_interpreters_it_was_not_given_to() -> None:
    """plugins.register_global attaches the plugin to interpreters created afterwards."""
    from xsm_celery.plugins import register_global, unregister_global

    store = DeadLetterStore()
    plugin = DeadLetterPlugin(store)
    register_global(plugin)
    try:
        machine = create_machine(retry_chart(), logic=retry_logic(max_attempts=1))
        clock = SimulatedClock()
        interp = SyncInterpreter(machine, clock=clock).start()
        clock.increment(10_000)
        assert interp.matches("job.deadLettered")
    finally:
        unregister_global(plugin)
    assert [r.machine_id for r in store.all()] == ["job"]
