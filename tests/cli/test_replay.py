"""``dlq replay``: dry runs, real task replays through a Celery app, refusals and failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli import proj
from tests.cli.conftest import Invoke, Seeded
from tests.cli.test_dlq import one_error_line
from tests.contract_dead_letters import make_record
from xsm_celery.patterns.dead_letter import DeadLetter

APP = "tests.cli.proj:app"


def drain() -> list[Any]:
    """Every message waiting on the in-memory broker's default queue, removed from it."""
    messages = []
    with proj.app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery", no_ack=True)
        while True:
            try:
                messages.append(queue.get(block=False))
            except queue.Empty:
                return messages


@pytest.fixture
def task_record(seeded: Seeded) -> Iterator[DeadLetter]:
    """A task dead letter with plain (not redacted) arguments, in the seeded store."""
    drain()
    record = make_record(task_name=proj.TASK_NAME, task_args=[42], task_kwargs={"amount": 9.5})
    seeded.store.put(record)
    yield record
    drain()


def replay(invoke: Invoke, seeded: Seeded, record_id: str, *args: str) -> Any:
    return invoke("dlq", "--dlq", seeded.url, "--app", APP, "replay", record_id, *args)


class TestTaskReplay:
    """Task dead letters replay through the Celery app."""

    def test_a_dry_run_is_the_default_and_changes_nothing(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """Without --no-dry-run nothing is sent, resolved or audited, and the exit is 0."""
        result = replay(invoke, seeded, task_record.id)
        assert result.exit_code == 0, result.output
        assert "dry run" in result.stdout
        assert "cli_tests.charge" in result.stdout
        assert drain() == []
        assert seeded.store.get(task_record.id).resolved_at is None  # type: ignore[union-attr]
        assert seeded.store.audit_log(task_record.id) == []

    def test_a_real_replay_sends_the_task_resolves_and_audits(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """--no-dry-run --yes --reason sends the original arguments with a new task id."""
        result = replay(
            invoke,
            seeded,
            task_record.id,
            "--no-dry-run",
            "--yes",
            "--reason",
            "card processor fixed",
            "--actor",
            "ana",
            "--json",
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["dry_run"], data["task_name"]) == (False, proj.TASK_NAME)
        [message] = drain()
        assert message.headers["task"] == proj.TASK_NAME
        assert message.headers["id"] == data["task_id"] != task_record.task_id
        args, kwargs, _ = message.decode()
        assert (args, kwargs) == ([42], {"amount": 9.5})
        assert seeded.store.get(task_record.id).resolved_at is not None  # type: ignore[union-attr]
        [entry] = seeded.store.audit_log(task_record.id)
        assert (entry["action"], entry["actor"], entry["reason"]) == (
            "replay",
            "ana",
            "card processor fixed",
        )

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--no-dry-run", "--reason", "r"], "without --yes"),
            (["--no-dry-run", "--yes"], "needs --reason"),
            (["--no-dry-run", "--yes", "--reason", " "], "needs --reason"),
        ],
    )
    def test_guard_rails_exit_2_and_send_nothing(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter, args: list[str], message: str
    ) -> None:
        """A real replay without --yes and a reason is refused before anything is sent."""
        result = replay(invoke, seeded, task_record.id, *args)
        assert result.exit_code == 2
        assert message in one_error_line(result)
        assert drain() == []
        assert seeded.store.get(task_record.id).resolved_at is None  # type: ignore[union-attr]

    def test_a_resolved_record_is_refused(self, invoke: Invoke, seeded: Seeded) -> None:
        """A record already resolved is not sent twice: exit 2."""
        result = replay(
            invoke, seeded, seeded.resolved.id, "--no-dry-run", "--yes", "--reason", "again"
        )
        assert result.exit_code == 2
        assert "already resolved" in one_error_line(result)

    def test_redacted_arguments_are_refused(self, invoke: Invoke, seeded: Seeded) -> None:
        """A record whose arguments were masked cannot be replayed faithfully: exit 2."""
        result = replay(invoke, seeded, seeded.task.id, "--no-dry-run", "--yes", "--reason", "r")
        assert result.exit_code == 2
        assert "redacted arguments" in one_error_line(result)

    def test_an_unknown_id_is_refused(self, invoke: Invoke, seeded: Seeded) -> None:
        """Replaying an id that is not in the store exits 2."""
        result = replay(invoke, seeded, "no-such-id")
        assert result.exit_code == 2
        assert "no dead letter" in one_error_line(result)

    def test_a_task_replay_needs_an_app(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """Without --app (and outside celery -A) a task record cannot be sent: exit 2."""
        result = invoke("dlq", "--dlq", seeded.url, "replay", task_record.id)
        assert result.exit_code == 2
        assert "--app module:app" in one_error_line(result)

    def test_an_app_that_cannot_be_imported_is_refused(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """--app naming a missing module exits 2 with the import error."""
        result = invoke(
            "dlq", "--dlq", seeded.url, "--app", "no_such_project:app", "replay", task_record.id
        )
        assert result.exit_code == 2
        assert "cannot load Celery app 'no_such_project:app'" in one_error_line(result)

    def test_force_is_ignored_with_a_warning(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """--force means nothing for a task (its chart starts fresh); it warns on stderr."""
        result = replay(invoke, seeded, task_record.id, "--force")
        assert result.exit_code == 0
        assert "--force is ignored" in result.stderr

    def test_a_replay_the_broker_refuses_exits_1(
        self, invoke: Invoke, seeded: Seeded, task_record: DeadLetter
    ) -> None:
        """A real replay that cannot be sent exits 1, one line, and the record stays open."""
        result = invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "--app",
            "tests.cli.proj:unreachable",
            "replay",
            task_record.id,
            "--no-dry-run",
            "--yes",
            "--reason",
            "r",
            "--json",
        )
        assert result.exit_code == 1
        assert "stays unresolved" in one_error_line(result)
        assert seeded.store.get(task_record.id).resolved_at is None  # type: ignore[union-attr]


class TestOtherRecords:
    """Records that are not Celery tasks."""

    def test_a_chart_state_record_is_refused(self, invoke: Invoke, seeded: Seeded) -> None:
        """A dead letter captured from a chart state has nothing to resend: exit 2."""
        result = invoke("dlq", "--dlq", seeded.url, "replay", seeded.chart.id)
        assert result.exit_code == 2
        assert "captured from a chart state" in one_error_line(result)

    def test_an_envelope_record_needs_its_dispatcher(self, invoke: Invoke, seeded: Seeded) -> None:
        """An envelope dead letter without --store and --machine is refused: exit 2."""
        result = invoke("dlq", "--dlq", seeded.url, "replay", seeded.envelope.id)
        assert result.exit_code == 2
        line = one_error_line(result)
        assert "envelope" in line
