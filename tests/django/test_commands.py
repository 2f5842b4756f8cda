"""The management commands: xsm_dlq (list, show, replay, resolve, purge), xsm_relay, xsm_timers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tests.django.admin_support import MEMORY_APP, sent_tasks, task_record
from tests.django.project.brokers import BROKER
from xsm_celery.django.management.commands.xsm_dlq import parse_age
from xsm_celery.django.management.looping import repeat
from xsm_celery.django.models import AuditEntry, DeadLetterRecord
from xsm_celery.django.stores import DjangoDeadLetterStore, DjangoOutboxStore, DjangoTimerStore
from xsm_celery.eda import Envelope


@pytest.fixture
def app(sqlite_db: str) -> Iterator[Any]:
    """The in-memory Celery app, named in XSM_CELERY, with an empty broker."""
    from tests.django.project.celery import memory_app

    with override_settings(
        XSM_CELERY={"CELERY_APP": MEMORY_APP, "BROKER": "tests.django.project.brokers:fake_broker"}
    ):
        sent_tasks(memory_app)
        BROKER.clear()
        yield memory_app


def run(*args: str) -> str:
    """Run a command and return what it printed."""
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> CommandError:
    """Run a command expected to fail and return its error."""
    with pytest.raises(CommandError) as info:
        run(*args)
    return info.value


def test_list_prints_open_records_and_json(app: Any) -> None:
    """list shows open records newest first; --all adds resolved ones; --json is parseable."""
    old = task_record(app, taken_at=100.0)
    new = task_record(app, taken_at=200.0)
    done = task_record(app, resolved_at=1.0)
    text = run("xsm_dlq", "list")
    assert text.index(new.id) < text.index(old.id)
    assert done.id not in text
    body = json.loads(run("xsm_dlq", "list", "--all", "--json"))
    assert body["count"] == 3


def test_show_prints_the_chain_and_the_audit(app: Any) -> None:
    """show prints the error chain oldest first and the audit trail."""
    record = task_record(app)
    DjangoDeadLetterStore().audit(record.id, "resolve", actor="ana", reason="r", outcome="ok")
    text = run("xsm_dlq", "show", record.id)
    assert text.index("1. TimeoutError: gateway slow") < text.index("2. ConnectionError")
    assert "resolve by ana: r -> ok" in text
    assert json.loads(run("xsm_dlq", "show", record.id, "--json"))["audit"][0]["actor"] == "ana"


def test_an_unknown_id_exits_2(app: Any) -> None:
    """show of a missing record is refused input (exit code 2)."""
    assert refused("xsm_dlq", "show", "nope").returncode == 2


def test_replay_is_a_dry_run_by_default(app: Any) -> None:
    """Without --no-dry-run nothing is sent, resolved or audited."""
    record = task_record(app)
    assert "would send shop.charge" in run("xsm_dlq", "replay", record.id)
    assert sent_tasks(app) == []
    assert not AuditEntry.objects.exists()


def test_a_real_replay_needs_yes_and_a_reason(app: Any) -> None:
    """--no-dry-run without --yes or --reason exits 2; with both it sends and audits."""
    record = task_record(app)
    assert refused("xsm_dlq", "replay", record.id, "--no-dry-run").returncode == 2
    assert refused("xsm_dlq", "replay", record.id, "--no-dry-run", "--yes").returncode == 2
    out = run(
        "xsm_dlq",
        "replay",
        record.id,
        "--no-dry-run",
        "--yes",
        "--reason",
        "fixed",
        "--actor",
        "cron",
        "--json",
    )
    assert json.loads(out)["status"] == "sent"
    assert sent_tasks(app) == [("shop.charge", [7], {"amount": 20})]
    assert AuditEntry.objects.get(record_id=record.id).actor == "cron"


def test_a_refused_replay_exits_2(app: Any) -> None:
    """A replay that cannot reproduce the call (redacted arguments) is refused with exit 2."""
    record = task_record(app, task_kwargs={"card_token": "***"})
    error = refused("xsm_dlq", "replay", record.id, "--no-dry-run", "--yes", "--reason", "x!x")
    assert error.returncode == 2
    assert "redacted arguments" in str(error)


def test_resolve_and_purge_by_id(app: Any) -> None:
    """resolve and purge --id act on one record and are audited."""
    record = task_record(app)
    run("xsm_dlq", "resolve", record.id, "--yes", "--reason", "by hand")
    assert DeadLetterRecord.objects.get(id=record.id).resolved_at is not None
    run("xsm_dlq", "purge", "--id", record.id, "--yes", "--reason", "retention")
    assert not DeadLetterRecord.objects.exists()
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["resolve", "purge"]


def test_purge_older_than_keeps_recent_records(app: Any) -> None:
    """purge --older-than --include-unresolved deletes only old records, audits the sweep once."""
    task_record(app, taken_at=time.time() - 40 * 86_400)
    recent = task_record(app, taken_at=time.time())
    out = run(
        "xsm_dlq",
        "purge",
        "--older-than",
        "30d",
        "--yes",
        "--reason",
        "retention",
        "--include-unresolved",
    )
    assert "purged 1" in out
    assert list(DeadLetterRecord.objects.values_list("id", flat=True)) == [recent.id]
    assert AuditEntry.objects.get().record_id == "*"


def test_purge_by_age_keeps_unresolved_records(app: Any) -> None:
    """Without --include-unresolved an old record nobody resolved is kept."""
    old = task_record(app, taken_at=time.time() - 40 * 86_400)
    done = task_record(app, taken_at=time.time() - 40 * 86_400)
    DeadLetterRecord.objects.filter(id=done.id).update(resolved_at=time.time())
    out = run("xsm_dlq", "purge", "--older-than", "30d", "--yes", "--reason", "retention")
    assert "purged 1" in out
    assert list(DeadLetterRecord.objects.values_list("id", flat=True)) == [old.id]


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("2w", 1_209_600)])
def test_ages_parse(text: str, seconds: float) -> None:
    """Ages take s, m, h, d and w units."""
    assert parse_age(text) == seconds


def test_a_bad_age_exits_2(app: Any) -> None:
    """An age without a unit is refused input."""
    assert (
        refused("xsm_dlq", "purge", "--older-than", "30", "--yes", "--reason", "x!x").returncode
        == 2
    )


def test_relay_publishes_pending_rows_and_marks_them_sent(app: Any) -> None:
    """xsm_relay publishes every pending row through the configured broker."""
    outbox = DjangoOutboxStore()
    envs = [Envelope.new(type="order.paid", subject=f"o-{n}") for n in range(3)]
    for env in envs:
        outbox.add("orders", env)
    assert "relayed 3 row(s); 0 pending" in run("xsm_relay", "--owner", "test")
    assert [e.id for e in BROKER.published_on("orders")] == [e.id for e in envs]
    assert outbox.count(pending_only=True) == 0


def test_relay_sets_a_refused_row_aside_and_says_so(app: Any) -> None:
    """With --max-attempts 1 a row the broker refuses is failed and the rest go out."""
    from xsm_celery.errors import BrokerPublishError

    outbox = DjangoOutboxStore()
    envs = [Envelope.new(type="order.paid", subject=f"o-{n}") for n in range(3)]
    for env in envs:
        outbox.add("orders", env)
    BROKER.fail_next_publish(BrokerPublishError("the broker refused the message"))
    output = run("xsm_relay", "--owner", "test", "--max-attempts", "1")
    assert "relayed 2 row(s); 0 pending, 1 failed" in output
    assert [e.id for e in BROKER.published_on("orders")][-2:] == [e.id for e in envs[1:]]
    assert [f.envelope.id for f in outbox.failed()] == [envs[0].id]


def test_relay_refuses_bad_options(app: Any) -> None:
    """A non-positive batch is refused input."""
    assert refused("xsm_relay", "--batch", "-1").returncode == 2


def test_timers_publish_due_retries(app: Any) -> None:
    """xsm_timers sends the task of every due durable timer and deletes the timer."""
    timers = DjangoTimerStore()
    timers.schedule(
        "task-id-1", time.time() - 1, {"task": "shop.charge", "args": [9], "kwargs": {"amount": 1}}
    )
    timers.schedule("task-id-2", time.time() + 3600, {"task": "shop.charge"})
    with override_settings(XSM_CELERY={"CELERY_APP": MEMORY_APP}):
        assert "fired 1 due timer(s)" in run("xsm_timers", "--owner", "test")
    assert sent_tasks(app) == [("shop.charge", [9], {"amount": 1})]
    assert timers.count() == 1


def test_repeat_runs_the_requested_number_of_times() -> None:
    """The command loop runs N times and sleeps only between runs."""
    calls: list[str] = []
    slept: list[float] = []
    assert repeat(lambda: calls.append("x"), runs=3, interval_s=2.0, sleep=slept.append) == 3
    assert calls == ["x", "x", "x"]
    assert slept == [2.0, 2.0]
