"""A step's transaction on the SQLAlchemy store: its statements, its locks, its transition log.

On PostgreSQL a step is one claim-and-lock statement and one write (``postgres_session``);
on SQLite it is the stores' own calls (``generic_session``). Both keep the same guarantees,
checked here on real databases with real concurrent connections; no broker is needed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery

from tests.celery.workflow_support import private_schema
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.celery.workflow.step import Message
from xsm_celery.engine import MachineLogic, create_machine
from xsm_celery.errors import ConflictError, LockTimeoutError, WorkflowStepError
from xsm_celery.sqlalchemy.connect import make_engine

CHART = {
    "id": "tally",
    "initial": "open",
    "context": {"n": 0},
    "states": {
        "open": {"on": {"INC": {"actions": "inc"}, "BOOM": {"actions": "boom"}, "CLOSE": "closed"}},
        "closed": {"on": {"REOPEN": "open", "BOOM": {"target": "open", "actions": "boom"}}},
    },
}


def _inc(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["n"] += 1


def _boom(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    raise RuntimeError("the ledger is down")


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A SQLite file, a private PostgreSQL schema, or PgBouncer's database (transaction mode)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tally.db'}"
        return
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    with private_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture(params=["postgres", "pgbouncer"])
def postgres_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """A private PostgreSQL schema, or PgBouncer's database in transaction pooling mode."""
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    with private_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


def _tally(store: str, **options: Any) -> Workflow:
    app = Celery(f"tally-{uuid.uuid4().hex[:8]}")
    logic = MachineLogic(actions={"inc": _inc, "boom": _boom})
    return Xsm(app).workflow(
        create_machine(CHART, logic=logic), store=store, name="tally", **options
    )


def _event(kind: str = "INC", ident: str | None = None) -> Message:
    return Message(ident or uuid.uuid4().hex, "event", type=kind)


def _n(tally: Workflow, key: str) -> int:
    view = tally.get(key)
    assert view is not None
    return int(view.context["n"])


def test_an_event_is_two_statements_between_begin_and_commit(postgres_store: str) -> None:
    """Claim-and-lock, then the write with its receipt and log: as few as the task by hand."""
    tally = _tally(postgres_store)
    tally.start("k1")
    seen: list[str] = []
    engine = tally.stores().snapshots.engine
    listen = sa.event.listens_for(engine, "before_cursor_execute")

    @listen
    def _count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(" ".join(statement.split()[:2]))

    try:
        assert tally.step("k1", _event()).outcome == "applied"
    finally:
        sa.event.remove(engine, "before_cursor_execute", _count)
    assert seen == ["WITH claim", "WITH receipt"]
    assert _n(tally, "k1") == 1


def test_the_transition_log_commits_with_the_step(store_url: str) -> None:
    """Each step's transitions are logged in its transaction; a failed step logs nothing."""
    tally = _tally(store_url)
    tally.start("k2")
    tally.step("k2", _event("CLOSE"))
    with pytest.raises(WorkflowStepError, match="ledger is down"):
        tally.step("k2", _event("BOOM"))
    tally.step("k2", _event("REOPEN"))
    log = tally.stores().journal.recent("tally", "k2")
    assert [(t["event"], t["source"], t["target"], t["message"]) for t in log] == [
        ("REOPEN", "tally.closed", "tally.open", "event"),
        ("CLOSE", "tally.open", "tally.closed", "event"),
        ("xstate.init", "", "tally.open", "start"),
    ]
    assert tally.stores().journal.recent("tally", "other") == []


def test_a_redelivery_is_answered_and_a_stale_message_leaves_no_receipt(store_url: str) -> None:
    """The same id twice applies once; a completion for an unknown instance keeps nothing."""
    tally = _tally(store_url)
    tally.start("k3")
    assert tally.step("k3", _event(ident="same")).outcome == "applied"
    assert tally.step("k3", _event(ident="same")).outcome == "duplicate"
    assert _n(tally, "k3") == 1
    stale = Message("done-1", "done", invoke="nothing", dispatch="t-1")
    assert tally.step("nobody", stale).outcome == "stale"
    assert tally.stores().inbox.get("tally:nobody", "done-1") is None
    assert tally.get("nobody") is None


def test_an_expired_inbox_entry_is_taken_over(store_url: str) -> None:
    """With a zero TTL an id is forgotten at once, so the same id applies again."""
    tally = _tally(store_url, inbox_ttl_s=0)
    tally.start("k4")
    tally.step("k4", _event(ident="again"))
    time.sleep(0.01)
    assert tally.step("k4", _event(ident="again")).outcome == "applied"
    assert _n(tally, "k4") == 2


def test_a_held_instance_makes_the_step_time_out_then_it_applies(postgres_store: str) -> None:
    """Another transaction holding the row: LockTimeoutError, nothing written; then it runs."""
    tally = _tally(postgres_store, lock_timeout_s=0.2)
    tally.start("k5")
    other = make_engine(postgres_store)
    try:
        with other.connect() as conn:
            conn.execute(sa.text("SELECT 1 FROM xsm_snapshots WHERE key = 'tally:k5' FOR UPDATE"))
            with pytest.raises(LockTimeoutError):
                tally.step("k5", _event(ident="held"))
            conn.rollback()
        assert tally.stores().inbox.get("tally:k5", "held") is None
        assert tally.step("k5", _event(ident="held")).outcome == "applied"
    finally:
        other.dispose()
    assert _n(tally, "k5") == 1


def test_a_delivery_committing_elsewhere_is_waited_for_then_a_duplicate(
    postgres_store: str,
) -> None:
    """The same id in another open transaction: the step waits for it, never runs beside it."""
    tally = _tally(postgres_store, lock_timeout_s=0.2)
    tally.start("k6")
    other = make_engine(postgres_store)
    try:
        with other.connect() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO xsm_inbox (scope, key, fingerprint, receipt, expires_at) "
                    "VALUES ('tally:k6', 'twice', '', '{}', NULL)"
                )
            )
            with pytest.raises(LockTimeoutError):
                tally.step("k6", _event(ident="twice"))
            conn.commit()
        assert tally.step("k6", _event(ident="twice")).outcome == "duplicate"
    finally:
        other.dispose()
    assert _n(tally, "k6") == 0


def test_concurrent_steps_of_one_key_never_interleave(store_url: str) -> None:
    """Four threads, forty events on one key: each applied once, none met a conflict."""
    tally = _tally(store_url, lock_timeout_s=10)
    tally.start("shared")
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        try:
            for n in range(10):
                tally.step("shared", _event(ident=f"w{worker}-{n}"))
        except BaseException as exc:  # reported below: a ConflictError means they interleaved
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _n(tally, "shared") == 40
    view = tally.get("shared")
    assert view is not None
    assert view.version == 41


def test_two_first_steps_of_a_new_key_conflict_and_lose_nothing(store_url: str) -> None:
    """Events racing to create an unknown key: the loser's ConflictError is retried, as the
    task would (uncounted), and every event is applied once."""
    tally = _tally(store_url, lock_timeout_s=10)
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        message = _event(ident=f"first-{worker}")
        barrier.wait()
        for _ in range(20):
            try:
                tally.step("fresh", message)
                return
            except ConflictError:
                continue
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=send, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _n(tally, "fresh") == 3
