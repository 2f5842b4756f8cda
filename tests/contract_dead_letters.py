"""The behaviour every ``DeadLetterStore`` shares, as a reusable test suite.

Subclass ``DeadLetterStoreContract`` in a test module and give it a ``store`` fixture that
returns an empty store; every test below then runs against that implementation::

    class TestMemoryStore(DeadLetterStoreContract):
        @pytest.fixture
        def store(self):
            return MemoryDeadLetterStore()

The suite only uses the protocol (``put``, ``get``, ``list``, ``all``, ``mark_resolved``,
``delete``, ``purge_older_than``, ``audit``, ``audit_log`` and the sink call), so the same
tests hold the memory, SQLite, SQLAlchemy and Django stores to one behaviour.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xsm_celery.engine.redact import redact
from xsm_celery.ids import new_id
from xsm_celery.patterns.dead_letter import DeadLetter, DeadLetterReason

__all__ = ["DeadLetterStoreContract", "make_record", "records"]


def make_record(**overrides: Any) -> DeadLetter:
    """A fully populated task dead letter; keyword arguments replace fields."""
    values: dict[str, Any] = {
        "machine_id": "job",
        "state_id": "job.deadLettered",
        "event": {"type": "error.platform.runTask", "payload": {"order": 7}},
        "attempts": 3,
        "errors": [
            {"source": "service", "name": "runTask", "type": "TimeoutError", "message": "slow"},
            {"source": "service", "name": "runTask", "type": "ValueError", "message": "bad 7"},
        ],
        "snapshot": {
            "value": "deadLettered",
            "context": {"attempt": 3, "nested": [1, {"a": None}]},
        },
        "taken_at": 1_700_000_000.125,
        "reason": "task_exhausted",
        "machine_hash": "h-1",
        "machine_version": "2",
        "task_name": "shop.charge",
        "task_id": "t-1",
        "task_args": [7, "eur"],
        "task_kwargs": {"card": "***", "retry": True},
        "hostname": "worker-1@host",
    }
    values.update(overrides)
    return DeadLetter(**values)


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=20,
)
# Keys a store would redact on write (``SWIFT``, ``pin``) are left out: stores that redact
# are allowed to change them, and that is tested where each store is.
_key = _text.filter(lambda k: redact({k: 0}) == {k: 0})
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_key, inner, max_size=3),
    max_leaves=8,
)
_error = st.fixed_dictionaries({"source": _text, "name": _text, "type": _text, "message": _text})


@st.composite
def records(draw: st.DrawFn) -> DeadLetter:
    """Arbitrary dead letters whose values JSON and every database can hold exactly."""
    envelope = draw(st.none() | st.dictionaries(_key, _json, max_size=3))
    return DeadLetter(
        id=new_id(),
        machine_id=draw(_text.filter(bool)),
        state_id=draw(_text),
        event={"type": draw(_text), "payload": draw(st.dictionaries(_key, _json, max_size=3))},
        attempts=draw(st.none() | st.integers(0, 10_000)),
        errors=draw(st.lists(_error, max_size=4)),
        snapshot=draw(st.dictionaries(_key, _json, max_size=4)),
        taken_at=draw(st.floats(0, 4_000_000_000, allow_nan=False)),
        reason=draw(st.sampled_from([r.value for r in DeadLetterReason])),
        envelope=envelope,
        topic=draw(st.none() | _text),
        machine_hash=draw(st.none() | _text),
        machine_version=draw(st.none() | _text),
        resolved_at=draw(st.none() | st.floats(0, 4_000_000_000, allow_nan=False)),
        task_name=draw(st.none() | _text),
        task_id=draw(st.none() | _text),
        task_args=draw(st.none() | st.lists(_json, max_size=3)),
        task_kwargs=draw(st.none() | st.dictionaries(_key, _json, max_size=3)),
        hostname=draw(st.none() | _text),
    )


class DeadLetterStoreContract:
    """Tests every dead-letter store must pass; subclasses supply the ``store`` fixture."""

    @pytest.fixture
    def store(self) -> Any:
        """An empty store of the implementation under test."""
        raise NotImplementedError("subclasses provide the store fixture")

    def test_put_returns_the_id_and_get_returns_an_equal_record(self, store: Any) -> None:
        """A stored record comes back equal, field for field."""
        record = make_record()
        assert store.put(record) == record.id
        assert store.get(record.id) == record

    def test_get_of_an_unknown_id_is_none(self, store: Any) -> None:
        """Asking for an id that was never stored gives None, not an error."""
        assert store.get(new_id()) is None

    def test_an_envelope_record_round_trips(self, store: Any) -> None:
        """Envelope dead letters keep the envelope and topic; task fields stay None."""
        record = make_record(
            reason="max_attempts",
            envelope={
                "id": "e-1",
                "type": "xsm.order.PAY",
                "subject": "o-42",
                "data": {"total": 9},
            },
            topic="orders",
            task_name=None,
            task_id=None,
            task_args=None,
            task_kwargs=None,
            hostname=None,
            attempts=None,
            errors=[],
            snapshot={},
        )
        store.put(record)
        assert store.get(record.id) == record

    def test_putting_the_same_id_replaces_the_record(self, store: Any) -> None:
        """A second put with an existing id overwrites it; there is still one record."""
        first = make_record(attempts=1)
        second = make_record(id=first.id, attempts=2)
        store.put(first)
        store.put(second)
        assert store.get(first.id) == second
        assert len(store.all()) == 1

    def test_a_store_is_a_sink(self, store: Any) -> None:
        """Calling the store with a record stores it, as a DeadLetterPlugin sink does."""
        record = make_record()
        store(record)
        assert store.get(record.id) == record

    def test_list_is_newest_first_and_respects_the_limit(self, store: Any) -> None:
        """list() orders by taken_at descending and returns at most ``limit`` records."""
        old, mid, new = (make_record(taken_at=t) for t in (100.0, 200.0, 300.0))
        for record in (mid, new, old):
            store.put(record)
        assert [r.id for r in store.list()] == [new.id, mid.id, old.id]
        assert [r.id for r in store.list(limit=2)] == [new.id, mid.id]
        assert store.list(limit=0) == []

    def test_list_breaks_taken_at_ties_by_id(self, store: Any) -> None:
        """Records taken at the same instant list by id, newest id first."""
        first, second = make_record(taken_at=5.0), make_record(taken_at=5.0)
        store.put(first)
        store.put(second)
        assert [r.id for r in store.list()] == [second.id, first.id]

    @pytest.mark.parametrize("limit", [-1, 1.5, True, "10"])
    def test_list_refuses_a_bad_limit(self, store: Any, limit: Any) -> None:
        """A negative, fractional, boolean or string limit is a ValueError."""
        with pytest.raises(ValueError, match="limit"):
            store.list(limit=limit)

    def test_list_hides_resolved_records_unless_asked(self, store: Any) -> None:
        """Resolved records are left out by default and included with include_resolved."""
        open_, done = make_record(taken_at=1.0), make_record(taken_at=2.0, resolved_at=3.0)
        store.put(open_)
        store.put(done)
        assert [r.id for r in store.list()] == [open_.id]
        assert [r.id for r in store.list(include_resolved=True)] == [done.id, open_.id]

    def test_all_returns_every_record_oldest_first(self, store: Any) -> None:
        """all() includes resolved records, in the order they were taken."""
        records_ = [
            make_record(taken_at=float(n), resolved_at=9.0 if n == 1 else None) for n in range(3)
        ]
        for record in records_:
            store.put(record)
        assert [r.id for r in store.all()] == [r.id for r in records_]

    def test_mark_resolved_sets_the_given_time(self, store: Any) -> None:
        """mark_resolved() with a time stores exactly that time and returns True."""
        record = make_record()
        store.put(record)
        assert store.mark_resolved(record.id, resolved_at=1_800_000_000.5) is True
        resolved = store.get(record.id)
        assert resolved is not None
        assert resolved.resolved_at == 1_800_000_000.5
        assert store.list() == []

    def test_mark_resolved_defaults_to_now(self, store: Any) -> None:
        """Without a time, the record is resolved at the current wall-clock time."""
        record = make_record()
        store.put(record)
        before = time.time()
        store.mark_resolved(record.id)
        resolved = store.get(record.id)
        assert resolved is not None
        assert resolved.resolved_at is not None
        assert before - 1 <= resolved.resolved_at <= time.time() + 1

    def test_mark_resolved_of_an_unknown_id_is_false(self, store: Any) -> None:
        """Resolving a record that does not exist reports False and creates nothing."""
        assert store.mark_resolved(new_id()) is False
        assert store.all() == []

    def test_mark_resolved_refuses_nan(self, store: Any) -> None:
        """A NaN resolution time is refused rather than stored."""
        record = make_record()
        store.put(record)
        with pytest.raises(ValueError, match="NaN"):
            store.mark_resolved(record.id, resolved_at=math.nan)

    def test_delete_removes_the_record(self, store: Any) -> None:
        """delete() is True once and False after, and the record is gone."""
        record = make_record()
        store.put(record)
        assert store.delete(record.id) is True
        assert store.delete(record.id) is False
        assert store.get(record.id) is None

    def test_purge_removes_only_records_taken_before_the_cutoff(self, store: Any) -> None:
        """Records strictly older than the cutoff go; one taken exactly at it stays."""
        old, edge, new = (make_record(taken_at=t) for t in (10.0, 20.0, 30.0))
        for record in (old, edge, new):
            store.put(record)
        assert store.purge_older_than(20.0) == 1
        assert sorted(r.id for r in store.all()) == sorted([edge.id, new.id])

    def test_purge_includes_resolved_records(self, store: Any) -> None:
        """Purging by age removes old records whether or not they were resolved."""
        store.put(make_record(taken_at=1.0, resolved_at=2.0))
        store.put(make_record(taken_at=1.0))
        assert store.purge_older_than(5.0) == 2
        assert store.all() == []

    @pytest.mark.parametrize("cutoff", [math.nan, "yesterday", None])
    def test_purge_refuses_a_bad_cutoff(self, store: Any, cutoff: Any) -> None:
        """A NaN or non-numeric cutoff raises ValueError and deletes nothing."""
        store.put(make_record(taken_at=1.0))
        with pytest.raises(ValueError, match="cutoff"):
            store.purge_older_than(cutoff)
        assert len(store.all()) == 1

    def test_audit_entries_come_back_oldest_first_with_every_field(self, store: Any) -> None:
        """audit_log() returns each action with record, action, actor, reason, outcome, at."""
        before = time.time()
        store.audit("r-1", "replay", actor="ana", reason="fixed in 1.4", outcome="sent t-9")
        store.audit("r-1", "resolve", actor="bo", reason="done", outcome="resolved")
        log = store.audit_log()
        assert [
            (e["record_id"], e["action"], e["actor"], e["reason"], e["outcome"]) for e in log
        ] == [
            ("r-1", "replay", "ana", "fixed in 1.4", "sent t-9"),
            ("r-1", "resolve", "bo", "done", "resolved"),
        ]
        assert all(before - 1 <= e["at"] <= time.time() + 1 for e in log)

    def test_audit_log_filters_by_record(self, store: Any) -> None:
        """audit_log(record_id) returns only that record's entries."""
        store.audit("r-1", "purge", actor="ana", reason="retention", outcome="purged")
        store.audit("r-2", "purge", actor="ana", reason="retention", outcome="purged")
        assert [e["record_id"] for e in store.audit_log("r-2")] == ["r-2"]
        assert store.audit_log("r-3") == []

    def test_the_audit_trail_outlives_the_record(self, store: Any) -> None:
        """Deleting or purging a record keeps its audit entries."""
        record = make_record()
        store.put(record)
        store.audit(record.id, "purge", actor="ana", reason="retention", outcome="purged")
        store.delete(record.id)
        assert [e["action"] for e in store.audit_log(record.id)] == ["purge"]

    @settings(
        max_examples=25,
        deadline=None,
        # Each store's test class runs this one contract method: one executor per store,
        # none of them holding state between examples (the store is the fixture).
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(record=records())
    def test_any_record_round_trips(self, store: Any, record: DeadLetter) -> None:
        """Whatever JSON-safe values a record holds, get() returns an equal record."""
        store.put(record)
        assert store.get(record.id) == record
