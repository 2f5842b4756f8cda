"""persisted(), the lock strategies and IdempotencyPlugin on real machines."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from xsm_celery import MachineLogic, SimulatedClock, create_machine
from xsm_celery.errors import ConflictError, LockTimeoutError, StoreError
from xsm_celery.persistence import (
    IdempotencyPlugin,
    MemoryInbox,
    MemoryStore,
    OptimisticLock,
    PessimisticLock,
    SQLiteInbox,
    SQLiteStore,
    is_persisted,
    persisted,
)


def _machine() -> Any:
    return create_machine(
        {
            "id": "c",
            "initial": "on",
            "context": {"n": 0},
            "states": {
                "on": {
                    "on": {
                        "INC": {"actions": "inc"},
                        "WAIT": "waiting",
                        "BAD": {"actions": "boom"},
                    },
                },
                "waiting": {"after": {"1000": {"target": "on", "actions": "inc"}}},
            },
        },
        logic=MachineLogic(
            actions={
                "inc": lambda i, ctx, e, a: ctx.update(n=ctx["n"] + 1),
                "boom": lambda i, ctx, e, a: (_ for _ in ()).throw(RuntimeError("boom")),
            }
        ),
    )


def _n(store: Any, key: str = "k") -> int:
    return int(json.loads(store.load(key).snapshot)["context"]["n"])


class Recorder:
    """A plugin recording the persistence hooks it sees."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_before_save(self, interp: Any) -> None:
        self.calls.append("before_save")

    def on_persist(self, interp: Any, store: Any) -> None:
        self.calls.append("persist")

    def on_commit(self, interp: Any) -> None:
        self.calls.append("commit")

    def on_rollback(self, interp: Any) -> None:
        self.calls.append("rollback")


def test_new_instance_is_started_saved_and_stopped() -> None:
    """The first block starts the machine, saves version 1, and stops the interpreter."""
    store = MemoryStore()
    with persisted(store, "k", _machine()) as interp:
        assert interp.store_key == "k"
        assert is_persisted(interp)
        interp.send("INC")
    assert store.load("k").version == 1
    assert _n(store) == 1
    assert interp.status == "stopped"
    assert not is_persisted(interp)


def test_next_block_continues_from_the_snapshot() -> None:
    """A later block restores the saved context and bumps the version."""
    store = MemoryStore()
    for _ in range(3):
        with persisted(store, "k", _machine()) as interp:
            interp.send("INC")
    assert (_n(store), store.load("k").version) == (3, 3)


def test_exception_in_the_block_saves_nothing() -> None:
    """Nothing is written when the block raises; the error propagates."""
    store = MemoryStore()

    def run() -> None:
        with persisted(store, "k", _machine()) as interp:
            interp.send("INC")
            raise KeyError("caller failed")

    with pytest.raises(KeyError):
        run()
    assert store.load("k") is None


def test_hooks_run_in_order() -> None:
    """before_save, persist (in the transaction), then commit; rollback on failure."""
    recorder = Recorder()
    with persisted(MemoryStore(), "k", _machine(), plugins=[recorder]):
        pass
    assert recorder.calls == ["before_save", "persist", "commit"]
    failed = Recorder()
    with pytest.raises(RuntimeError), persisted(MemoryStore(), "k", _machine(), plugins=[failed]):
        raise RuntimeError("x")
    assert failed.calls == ["rollback"]


def test_create_false_refuses_an_unknown_key() -> None:
    """create=False raises StoreError rather than starting a new instance."""
    with (
        pytest.raises(StoreError, match="no stored instance"),
        persisted(MemoryStore(), "nope", _machine(), create=False),
    ):
        pass


def test_pending_timer_fires_in_a_later_block() -> None:
    """An after timer armed in one block fires, overdue, when a later block loads the instance."""
    store = MemoryStore()
    clock = SimulatedClock(wall_start=1_000_000.0)
    with persisted(store, "k", _machine(), clock=clock) as interp:
        interp.send("WAIT")
    later = SimulatedClock(wall_start=1_000_002.0)
    with persisted(store, "k", _machine(), clock=later) as interp:
        assert interp.matches("c.on")
    assert _n(store) == 1


def test_optimistic_conflict_raises_at_exit() -> None:
    """A writer that saved first makes the block's save raise ConflictError."""
    store = MemoryStore()

    def run() -> None:
        with persisted(store, "k", _machine()) as interp:
            interp.send("INC")
            store.save("k", store.load("k").snapshot if store.load("k") else "{}")

    with pytest.raises(ConflictError):
        run()


def test_optimistic_run_retries_after_a_lost_race() -> None:
    """OptimisticLock.run re-runs the block from a fresh load after a conflict."""
    store = MemoryStore()
    machine = _machine()
    with persisted(store, "k", machine) as interp:
        interp.send("INC")
    raced = {"done": False}

    def act(interp: Any) -> str:
        interp.send("INC")
        if not raced["done"]:
            raced["done"] = True
            with persisted(store, "k", machine) as other:
                other.send("INC")
        return "ok"

    assert OptimisticLock(retries=2).run(store, "k", machine, act) == "ok"
    assert _n(store) == 3


def test_optimistic_run_gives_up_after_its_retries() -> None:
    """After its retries OptimisticLock.run lets the ConflictError through."""
    store = MemoryStore()
    machine = _machine()

    def always_race(interp: Any) -> None:
        with persisted(store, "k", machine) as other:
            other.send("INC")

    with pytest.raises(ConflictError):
        OptimisticLock(retries=1).run(store, "k", machine, always_race)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_pessimistic_lock_serialises_writers(kind: str, tmp_path: Path) -> None:
    """Under PessimisticLock concurrent blocks never lose an update."""
    store: Any = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    machine = _machine()
    lock = PessimisticLock(timeout=10)

    def work() -> None:
        for _ in range(10):
            lock.run(store, "k", machine, lambda interp: interp.send("INC"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _n(store) == 40


def test_pessimistic_lock_times_out() -> None:
    """A lock held elsewhere raises LockTimeoutError after the timeout."""
    store = MemoryStore()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.lock("k"):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    try:
        with (
            pytest.raises(LockTimeoutError),
            persisted(store, "k", _machine(), lock=PessimisticLock(timeout=0.05)),
        ):
            pass
    finally:
        release.set()
        thread.join()


def test_lock_options_are_checked() -> None:
    """Negative retries or timeouts are refused."""
    with pytest.raises(ValueError):
        OptimisticLock(retries=-1)
    with pytest.raises(ValueError):
        PessimisticLock(timeout=-1)


class TestIdempotencyPlugin:
    """IdempotencyPlugin on persisted instances: answered, not re-run."""

    def test_redelivery_is_answered_with_the_first_receipt(self) -> None:
        """The second send with the same key is a duplicate and runs nothing."""
        store, plugin = MemoryStore(), IdempotencyPlugin(MemoryInbox())
        receipts = []
        for _ in range(2):
            with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
                receipts.append(interp.send("INC", idempotency_key="op-1", wait=True))
        assert _n(store) == 1
        assert receipts[1].duplicate is True
        assert receipts[1].state_ids == receipts[0].state_ids

    def test_events_without_a_key_are_not_deduplicated(self) -> None:
        """Only events carrying a key go through the inbox."""
        store, plugin = MemoryStore(), IdempotencyPlugin(MemoryInbox())
        for _ in range(2):
            with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
                interp.send("INC")
        assert _n(store) == 2

    def test_a_rolled_back_block_releases_the_key(self) -> None:
        """If the block fails, the key is released and the retry runs."""
        store, plugin = MemoryStore(), IdempotencyPlugin(MemoryInbox())

        def failing() -> None:
            with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
                interp.send("INC", idempotency_key="op-1")
                raise RuntimeError("request failed")

        with pytest.raises(RuntimeError):
            failing()
        with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
            assert interp.send("INC", idempotency_key="op-1", wait=True).duplicate is False
        assert _n(store) == 1

    def test_reused_key_with_other_payload_is_refused(self) -> None:
        """A key first used with another payload gets a receipt carrying an error."""
        store, plugin = MemoryStore(), IdempotencyPlugin(MemoryInbox())
        with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
            interp.send("INC", idempotency_key="op-1", amount=1)
        with persisted(store, "k", _machine(), plugins=[plugin]) as interp:
            receipt = interp.send("INC", idempotency_key="op-1", amount=2, wait=True)
        assert isinstance(receipt.error, StoreError)
        assert _n(store) == 1

    def test_instances_have_separate_scopes(self) -> None:
        """The same key on two instances is two operations."""
        store, plugin = MemoryStore(), IdempotencyPlugin(MemoryInbox())
        for key in ("a", "b"):
            with persisted(store, key, _machine(), plugins=[plugin]) as interp:
                interp.send("INC", idempotency_key="op-1")
        assert (_n(store, "a"), _n(store, "b")) == (1, 1)

    def test_sqlite_receipt_commits_with_the_snapshot(self, tmp_path: Path) -> None:
        """On a shared SQLite database a failed save leaves no receipt behind."""
        store = SQLiteStore(tmp_path / "s.db")
        inbox = SQLiteInbox(store)
        plugin = IdempotencyPlugin(inbox)

        class FailInTransaction:
            def on_persist(self, interp: Any, store: Any) -> None:
                raise RuntimeError("after the write")

        def run() -> None:
            with persisted(store, "k", _machine(), plugins=[plugin, FailInTransaction()]) as interp:
                interp.send("INC", idempotency_key="op-1")

        with pytest.raises(RuntimeError):
            run()
        scope = IdempotencyPlugin.scope_for("", "k")
        assert inbox.get(scope, "op-1") is None
        assert store.load("k") is None
