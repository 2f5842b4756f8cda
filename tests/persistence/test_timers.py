"""DueTimerScanner: due after-timers of persisted instances fire once, even after a failed save."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.eda.outbox_contract import FakeClock
from xsm_celery import MachineLogic, SimulatedClock, create_machine
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence import (
    DueTimerScanner,
    DurableTimers,
    MemoryStore,
    MemoryTimerStore,
    deadlines_of,
    persisted,
)

T0 = 1_700_000_000.0


def _retry() -> Any:
    """A retry loop: every 1 s the after timer bumps the attempt counter and re-arms."""
    return create_machine(
        {
            "id": "job",
            "initial": "idle",
            "context": {"attempt": 0},
            "states": {
                "idle": {"on": {"START": "waiting"}},
                "waiting": {
                    "after": {"1000": {"target": "waiting", "reenter": True, "actions": "bump"}}
                },
            },
        },
        logic=MachineLogic(
            actions={"bump": lambda i, ctx, e, a: ctx.update(attempt=ctx["attempt"] + 1)}
        ),
    )


def _attempt(store: Any, key: str = "j-1") -> int:
    return int(json.loads(store.load(key).snapshot)["context"]["attempt"])


def _start(store: Any, key: str = "j-1", plugins: tuple[Any, ...] = ()) -> None:
    with persisted(
        store, key, _retry(), clock=SimulatedClock(wall_start=T0), plugins=plugins
    ) as interp:
        interp.send("START")


class FlakyStore(MemoryStore):
    """A store whose next save fails, like a crash between the step and the commit."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_saves = 0

    def save(self, key: str, snapshot: str, **kw: Any) -> int:
        if self.fail_saves:
            self.fail_saves -= 1
            raise StoreUnavailableError("database went away during the save")
        return super().save(key, snapshot, **kw)


def test_snapshot_records_due_times() -> None:
    """deadlines_of reads each pending timer's wall-clock due time."""
    store = MemoryStore()
    _start(store)
    [deadline] = deadlines_of(store.load("j-1").snapshot)
    assert deadline["due_at_wall"] == pytest.approx(T0 + 1.0)


def test_nothing_is_woken_before_it_is_due() -> None:
    """A scan before the due time leaves the instance alone."""
    store = MemoryStore()
    _start(store)
    scanner = DueTimerScanner(store, _retry())
    assert scanner.due_keys(T0 + 0.5) == []
    assert scanner.run_once(T0 + 0.5) == 0
    assert store.load("j-1").version == 1


def test_due_timer_fires_and_is_saved() -> None:
    """A scan after the due time fires the timer once and saves the instance."""
    store = MemoryStore()
    _start(store)
    scanner = DueTimerScanner(store, [_retry()])
    assert scanner.due_keys(T0 + 1.5) == [("j-1", pytest.approx(T0 + 1.0))]
    assert scanner.run_once(T0 + 1.5) == 1
    assert _attempt(store) == 1
    [deadline] = deadlines_of(store.load("j-1").snapshot)
    assert deadline["due_at_wall"] == pytest.approx(T0 + 2.5)
    assert scanner.run_once(T0 + 1.6) == 0


def test_a_crashed_save_does_not_double_bump() -> None:
    """After a failed save the next scan fires from the old snapshot: one bump, not two."""
    store = FlakyStore()
    _start(store)
    scanner = DueTimerScanner(store, _retry())
    store.fail_saves = 1
    result = scanner.scan(T0 + 1.5)
    assert (result.woken, result.failed) == ([], ["j-1"])
    assert _attempt(store) == 0
    assert scanner.run_once(T0 + 1.6) == 1
    assert _attempt(store) == 1


def test_unknown_machine_is_reported_not_raised() -> None:
    """An instance of a chart the scanner was not given fails its wake, logged."""
    store = MemoryStore()
    _start(store)
    other = create_machine({"id": "other", "initial": "a", "states": {"a": {}}})
    assert DueTimerScanner(store, {"other": other}).scan(T0 + 2).failed == ["j-1"]


class TestWithATimerIndex:
    """With a TimerStore kept by DurableTimers, scans read the index and lease rows."""

    def test_durable_timers_keep_the_index_in_step(self) -> None:
        """Every save rewrites the instance's timer rows."""
        store, timers = MemoryStore(), MemoryTimerStore()
        _start(store, plugins=(DurableTimers(timers),))
        [row] = timers.due(T0 + 5)
        assert (row.key, row.due_at) == ("j-1", pytest.approx(T0 + 1.0))
        scanner = DueTimerScanner(store, _retry(), timers=timers)
        assert scanner.run_once(T0 + 1.5) == 1
        [row] = timers.due(T0 + 5)
        assert row.due_at == pytest.approx(T0 + 2.5)
        assert len(timers) == 1

    def test_failed_wake_releases_its_rows_and_fires_once_later(self) -> None:
        """A failed save hands the rows back; the retry bumps once."""
        store, timers = FlakyStore(), MemoryTimerStore()
        _start(store, plugins=(DurableTimers(timers),))
        scanner = DueTimerScanner(store, _retry(), timers=timers, owner="s1")
        store.fail_saves = 1
        assert scanner.scan(T0 + 1.5).failed == ["j-1"]
        other = DueTimerScanner(store, _retry(), timers=timers, owner="s2")
        assert other.run_once(T0 + 1.6) == 1
        assert _attempt(store) == 1

    def test_two_scanners_never_wake_one_instance_together(self) -> None:
        """Rows leased by one scanner are skipped by another until the lease ends."""
        clock = FakeClock(T0)
        timers = MemoryTimerStore(clock=clock)
        timers.schedule("a", T0, {})
        first = timers.claim(T0 + 1, 10, "s1", 30)
        assert timers.claim(T0 + 1, 10, "s2", 30) == []
        clock.advance(31)
        assert [t.id for t in timers.claim(T0 + 1, 10, "s2", 30)] == [first[0].id]

    def test_memory_timer_store_deletes_by_id_once(self) -> None:
        """Release by a stranger frees nothing; delete by id succeeds once; by key finds none."""
        timers = MemoryTimerStore()
        timer_id = timers.schedule("k", T0, {"key": "1000"})
        assert timers.release([timer_id], "nobody") == 0
        assert timers.delete(timer_id) is True
        assert timers.delete(timer_id) is False
        assert timers.delete_key("k") == 0


def test_bad_batch_is_refused() -> None:
    """A batch below one is refused."""
    with pytest.raises(ValueError):
        DueTimerScanner(MemoryStore(), _retry(), batch=0)
