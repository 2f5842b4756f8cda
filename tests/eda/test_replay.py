"""replay_dead_letter: dry run by default, reuses the id, refuses a changed chart, audited."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.contract_dead_letters import make_record
from tests.eda.charts import counter
from xsm_celery import create_machine
from xsm_celery.eda import (
    Envelope,
    InboundDispatcher,
    MemoryDeadLetterStore,
    ReplayRefusedError,
    ReplayResult,
    SQLiteDeadLetterStore,
    replay_dead_letter,
)
from xsm_celery.persistence import MemoryInbox, MemoryStore


def _setup(tmp_path: Any = None, **options: Any) -> tuple[InboundDispatcher, Any, Any, Envelope]:
    """A dispatcher whose first INC delivery was dead-lettered (the action was broken then)."""
    store = MemoryStore()
    dlq: Any = SQLiteDeadLetterStore(tmp_path / "dlq.db") if tmp_path else MemoryDeadLetterStore()
    broken = InboundDispatcher(
        store,
        {"xsm.counter.INC": counter()},
        dead_letters=dlq,
        max_attempts=1,
        event_type=lambda e: "FAIL",
    )
    env = Envelope.new(type="xsm.counter.INC", subject="c-1", data={"n": 7})
    broken.handle(env)
    fixed = InboundDispatcher(store, {"xsm.counter.INC": counter()}, dead_letters=dlq, **options)
    return fixed, store, dlq, env


def _count(store: MemoryStore) -> int:
    record = store.load("c-1")
    return 0 if record is None else int(json.loads(record.snapshot)["context"]["count"])


def test_dry_run_is_the_default_and_sends_nothing() -> None:
    """Without dry_run=False nothing is sent, and the dry run is audited."""
    dispatcher, store, dlq, _env = _setup()
    [record] = dlq.all()
    result = replay_dead_letter(dlq, record.id, dispatcher, reason="fixed in 1.4.2", actor="ana")
    assert result == ReplayResult(record.id, True, "dry_run", [])
    assert _count(store) == 0
    assert dlq.audit_log(record.id)[-1]["outcome"] == "dry_run"
    assert dlq.get(record.id).resolved_at is None


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_real_replay_processes_resolves_and_audits(kind: str, tmp_path: Any) -> None:
    """A real replay runs the envelope, marks the record resolved and writes an audit row."""
    dispatcher, store, dlq, _env = _setup(tmp_path if kind == "sqlite" else None)
    [record] = dlq.all()
    result = replay_dead_letter(
        dlq, record.id, dispatcher, reason="fixed in 1.4.2", dry_run=False, actor="ana"
    )
    assert (result.outcome, result.dry_run) == ("processed", False)
    assert _count(store) == 1
    assert dlq.get(record.id).resolved_at is not None
    [entry] = dlq.audit_log(record.id)
    assert (entry["action"], entry["actor"], entry["reason"], entry["outcome"]) == (
        "replay",
        "ana",
        "fixed in 1.4.2",
        "processed",
    )


def test_double_replay_is_deduplicated_by_the_inbox() -> None:
    """The replay reuses the envelope id, so an inbox answers the second replay."""
    dispatcher, store, dlq, _env = _setup(inbox=MemoryInbox())
    [record] = dlq.all()
    first = replay_dead_letter(dlq, record.id, dispatcher, reason="r", dry_run=False)
    second = replay_dead_letter(dlq, record.id, dispatcher, reason="r", dry_run=False)
    assert (first.outcome, second.outcome) == ("processed", "duplicate")
    assert _count(store) == 1


def test_changed_chart_is_refused_unless_forced() -> None:
    """A record from another chart structure is refused, audited, and replays with force."""
    dispatcher, _store, dlq, _env = _setup()
    [record] = dlq.all()
    changed = create_machine({**counter().config, "version": "2"}, logic=counter().logic)
    dispatcher.machine_for_type = {"xsm.counter.INC": changed}
    with pytest.raises(ReplayRefusedError, match="--force"):
        replay_dead_letter(dlq, record.id, dispatcher, reason="r", dry_run=False)
    assert dlq.audit_log(record.id)[-1]["outcome"].startswith("refused")
    result = replay_dead_letter(dlq, record.id, dispatcher, reason="r", dry_run=False, force=True)
    assert result.outcome == "processed"
    assert any("changed since capture" in w for w in result.warnings)


def test_reason_is_required() -> None:
    """An empty reason is refused before anything else."""
    dispatcher, _, dlq, _ = _setup()
    with pytest.raises(ReplayRefusedError, match="reason"):
        replay_dead_letter(dlq, dlq.all()[0].id, dispatcher, reason="  ")


def test_unknown_record_is_refused() -> None:
    """A record id the store does not hold is refused."""
    dispatcher, _, dlq, _ = _setup()
    with pytest.raises(ReplayRefusedError, match="no dead letter"):
        replay_dead_letter(dlq, "nope", dispatcher, reason="r")


def test_chart_state_record_is_refused() -> None:
    """A record without an envelope (a chart dead letter) cannot be replayed."""
    dispatcher, _, dlq, _ = _setup()
    record = make_record(envelope=None)
    dlq.put(record)
    with pytest.raises(ReplayRefusedError, match="captured from a chart state"):
        replay_dead_letter(dlq, record.id, dispatcher, reason="r")


def test_no_machine_for_the_type_is_refused() -> None:
    """A dispatcher that does not know the record's type refuses it."""
    _, store, dlq, _ = _setup()
    other = InboundDispatcher(store, {}, dead_letters=dlq)
    with pytest.raises(ReplayRefusedError, match="no machine handles type"):
        replay_dead_letter(dlq, dlq.all()[0].id, other, reason="r")


def test_failed_replay_stays_unresolved() -> None:
    """A replay whose machine fails again reports it and leaves the record unresolved."""
    dispatcher, _, dlq, _ = _setup(event_type=lambda e: "FAIL")
    [record] = dlq.all()
    result = replay_dead_letter(dlq, record.id, dispatcher, reason="r", dry_run=False)
    assert result.outcome == "retried"
    assert dlq.get(record.id).resolved_at is None


def test_masked_values_are_warned_about() -> None:
    """Data masked at capture is replayed masked, with a warning saying so."""
    store, dlq = MemoryStore(), MemoryDeadLetterStore()
    broken = InboundDispatcher(
        store,
        {"xsm.counter.INC": counter()},
        dead_letters=dlq,
        max_attempts=1,
        event_type=lambda e: "FAIL",
    )
    broken.handle(Envelope.new(type="xsm.counter.INC", subject="c-1", data={"token": "t"}))
    fixed = InboundDispatcher(store, {"xsm.counter.INC": counter()}, dead_letters=dlq)
    result = replay_dead_letter(dlq, dlq.all()[0].id, fixed, reason="r")
    assert any("masked" in w for w in result.warnings)
