"""``dlq list/show/replay`` name the workflow instance a dead letter belongs to."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Invoke, Seeded
from tests.cli.test_dlq import one_error_line
from tests.cli.test_replay import APP, drain, replay
from tests.contract_dead_letters import make_record
from xsm_celery.patterns.dead_letter import DeadLetter


@pytest.fixture
def task_step(seeded: Seeded) -> DeadLetter:
    """A task step's give-up: its event payload names workflow ``order`` and key ``o-42``."""
    record = make_record(
        task_name="shop.charge",
        task_args=[7],
        task_kwargs={},
        event={"type": "error.platform.work", "payload": {"workflow": "order", "key": "o-42"}},
    )
    seeded.store.put(record)
    return record


@pytest.fixture
def step_message(seeded: Seeded) -> DeadLetter:
    """A step message that failed for good: ``xsm.workflow.order`` with ``[key, message]``."""
    message = {"id": "m-9", "kind": "event", "type": "SHIP"}
    record = make_record(
        task_name="xsm.workflow.order",
        task_args=["o-43", message],
        task_kwargs={},
        event={"type": "SHIP", "payload": {}},
    )
    seeded.store.put(record)
    return record


def test_show_names_the_workflow_and_key(
    invoke: Invoke, seeded: Seeded, task_step: DeadLetter
) -> None:
    """The detail has the workflow, the instance key and which part of it failed."""
    result = invoke("dlq", "--dlq", seeded.url, "show", task_step.id)
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "workflow order" in lines
    assert "workflow key o-42" in lines
    assert "workflow part task step" in lines


def test_list_has_a_workflow_column_when_a_record_belongs_to_one(
    invoke: Invoke, seeded: Seeded, task_step: DeadLetter, step_message: DeadLetter
) -> None:
    """Each workflow record's row names its instance; the others leave the column empty."""
    result = invoke("dlq", "--dlq", seeded.url, "list")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "Workflow instance" in result.stdout
    assert "order[o-42]" in rows[task_step.id]
    assert "order[o-43]" in rows[step_message.id]
    assert "order[" not in rows[seeded.task.id]


def test_list_has_no_workflow_column_without_workflow_records(
    invoke: Invoke, seeded: Seeded
) -> None:
    """Stores without workflows keep the table they had."""
    result = invoke("dlq", "--dlq", seeded.url, "list")
    assert result.exit_code == 0, result.output
    assert "Workflow" not in result.stdout


def test_a_step_message_dry_run_names_the_workflow_and_key(
    invoke: Invoke, seeded: Seeded, step_message: DeadLetter
) -> None:
    """The dry run says the message goes to that instance again, in text and in JSON."""
    drain()
    result = replay(invoke, seeded, step_message.id)
    assert result.exit_code == 0, result.output
    assert "to workflow order[o-43] again" in result.stdout
    assert f"{step_message.id}: workflow order, key o-43" in result.stdout
    as_json = json.loads(replay(invoke, seeded, step_message.id, "--json").stdout)
    assert (as_json["workflow"], as_json["key"], as_json["dry_run"]) == ("order", "o-43", True)
    assert drain() == []


def test_a_task_step_of_a_workflow_the_app_lacks_is_refused_naming_the_import(
    invoke: Invoke, seeded: Seeded, task_step: DeadLetter
) -> None:
    """Its instance cannot be checked without the workflow: exit 2, say what to import."""
    result = invoke("dlq", "--dlq", seeded.url, "--app", APP, "replay", task_step.id)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "task step of workflow order[o-42]" in line
    assert "import the module that calls xsm.workflow(...) for 'order'" in line
    assert drain() == []
