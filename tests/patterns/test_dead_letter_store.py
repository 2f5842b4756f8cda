"""The in-memory DeadLetterStore: its operator surface, bounds and thread safety."""

from __future__ import annotations

import math
import threading
import time

import pytest

from tests.patterns.test_dead_letter_record import make
from xsm_celery.patterns import DeadLetterStore
from xsm_celery.patterns.dead_letter import DeadLetterStoreProtocol, MemoryDeadLetterStore


def test_put_get_and_call_as_sink() -> None:
    """put returns the id; calling the store is put; get finds the record."""
    store = DeadLetterStore()
    first, second = make(), make()
    assert store.put(first) == first.id
    assert store(second) == second.id
    assert store.get(first.id) == first
    assert store.get("missing") is None
    assert len(store) == 2


def test_list_is_newest_first_and_limited() -> None:
    """list() returns newest first by taken_at and honours limit."""
    store = DeadLetterStore()
    records = [make(taken_at=float(t)) for t in (5, 1, 9, 3)]
    for record in records:
        store.put(record)
    assert [r.taken_at for r in store.list()] == [9, 5, 3, 1]
    assert [r.taken_at for r in store.list(limit=2)] == [9, 5]
    assert store.list(limit=0) == []
    assert [r.taken_at for r in store.all()] == [5, 1, 9, 3]


@pytest.mark.parametrize("limit", [-1, -100, 1.5, True])
def test_negative_or_odd_limit_is_refused(limit: object) -> None:
    """list(limit=-1) raises ValueError instead of silently dropping a record."""
    store = DeadLetterStore()
    store.put(make())
    with pytest.raises(ValueError, match="limit"):
        store.list(limit=limit)  # type: ignore[arg-type]


def test_mark_resolved_hides_from_list() -> None:
    """A resolved record leaves list() unless include_resolved, keeping its time."""
    store = DeadLetterStore(wall=lambda: 42.0)
    record = make()
    store.put(record)
    assert store.mark_resolved(record.id)
    assert store.list() == []
    [resolved] = store.list(include_resolved=True)
    assert resolved.resolved_at == 42.0
    assert store.mark_resolved(record.id, resolved_at=50.0)
    assert store.get(record.id).resolved_at == 50.0  # type: ignore[union-attr]
    assert not store.mark_resolved("missing")


def test_delete() -> None:
    """delete removes a record and says whether it existed."""
    store = DeadLetterStore()
    record = make()
    store.put(record)
    assert store.delete(record.id)
    assert not store.delete(record.id)


def test_purge_older_than() -> None:
    """purge_older_than drops records taken before the cutoff and counts them."""
    store = DeadLetterStore()
    for t in (10.0, 20.0, 30.0):
        store.put(make(taken_at=t))
    assert store.purge_older_than(25.0) == 2
    assert [r.taken_at for r in store.all()] == [30.0]
    assert store.purge_older_than(-math.inf) == 0
    assert store.purge_older_than(math.inf) == 1


@pytest.mark.parametrize("cutoff", [math.nan, "yesterday", None])
def test_nan_cutoff_is_refused_and_erases_nothing(cutoff: object) -> None:
    """purge_older_than(NaN) raises ValueError; the store keeps every record."""
    store = DeadLetterStore()
    store.put(make())
    with pytest.raises(ValueError, match="cutoff_wall"):
        store.purge_older_than(cutoff)  # type: ignore[arg-type]
    assert len(store) == 1


def test_duplicate_id_replaces() -> None:
    """Putting a record with an existing id replaces it (one row per id)."""
    store = DeadLetterStore()
    record = make()
    store.put(record)
    store.put(make(id=record.id, attempts=7))
    assert len(store) == 1
    assert store.get(record.id).attempts == 7  # type: ignore[union-attr]


def test_hundred_thousand_records_bounded_and_put_is_constant_time() -> None:
    """100,000 puts take linear time (O(1) each) and the store never holds more than its cap."""
    store = DeadLetterStore(max_records=100_000)
    started = time.perf_counter()
    for n in range(100_000):
        store.put(make(id=f"r{n:06d}", taken_at=float(n)))
    elapsed = time.perf_counter() - started
    assert len(store) == 100_000
    store.put(make(id="overflow"))
    assert len(store) == 100_000
    assert store.get("r000000") is None  # the oldest was evicted
    assert store.get("overflow") is not None
    assert elapsed < 60  # a quadratic put would take many minutes; this is not a timing test


def test_eviction_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Evicting a record past max_records logs a warning naming it."""
    store = DeadLetterStore(max_records=2)
    first = make()
    for record in (first, make(), make()):
        store.put(record)
    assert len(store) == 2
    assert first.id in caplog.text


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_bounds_must_be_positive_integers(bad: object) -> None:
    """max_records / max_audit below 1 are refused."""
    with pytest.raises(ValueError, match="max_records"):
        DeadLetterStore(max_records=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_audit"):
        DeadLetterStore(max_audit=bad)  # type: ignore[arg-type]


def test_put_refuses_other_objects() -> None:
    """put takes a DeadLetter only."""
    with pytest.raises(TypeError, match="DeadLetter"):
        DeadLetterStore().put({"id": "x"})  # type: ignore[arg-type]


def test_audit_log() -> None:
    """audit appends entries; audit_log filters by record id, oldest first."""
    store = DeadLetterStore(wall=lambda: 7.0)
    store.audit("a", "replay", actor="ops", reason="fixed upstream", outcome="ok")
    store.audit("b", "resolve", actor="ops", reason="dup", outcome="ok")
    store.audit("a", "purge", actor="cron", reason="retention", outcome="ok")
    assert [e["action"] for e in store.audit_log()] == ["replay", "resolve", "purge"]
    assert [e["action"] for e in store.audit_log("a")] == ["replay", "purge"]
    assert store.audit_log("a")[0] == {
        "record_id": "a",
        "action": "replay",
        "actor": "ops",
        "reason": "fixed upstream",
        "outcome": "ok",
        "at": 7.0,
    }


def test_audit_log_is_bounded() -> None:
    """The audit log keeps at most max_audit entries."""
    store = DeadLetterStore(max_audit=3)
    for n in range(10):
        store.audit(str(n), "replay", actor="a", reason="r", outcome="ok")
    assert [e["record_id"] for e in store.audit_log()] == ["7", "8", "9"]


def test_concurrent_puts_lose_nothing() -> None:
    """16 threads putting 500 records each: every record is stored once."""
    store = DeadLetterStore()
    barrier = threading.Barrier(16)

    def worker(n: int) -> None:
        barrier.wait()
        for i in range(500):
            store.put(make(id=f"{n}-{i}"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 8_000


def test_store_satisfies_the_protocol() -> None:
    """The memory store implements the protocol every store shares, under both names."""
    assert isinstance(DeadLetterStore(), DeadLetterStoreProtocol)
    assert MemoryDeadLetterStore is DeadLetterStore
