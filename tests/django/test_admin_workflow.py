"""The dead-letter admin names the workflow instance a record belongs to."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from tests.django.admin_support import task_record
from tests.django.test_admin import CHANGELIST, app, change_url, login  # noqa: F401 (fixture)


def step_payload(workflow: str, key: str) -> dict[str, Any]:
    """The event of a task step's give-up: the workflow header's ``{workflow, key}``."""
    return {"type": "error.platform.work", "payload": {"workflow": workflow, "key": key}}


def test_the_detail_page_names_the_workflow_and_key(app: Any) -> None:  # noqa: F811
    """A task step's page shows its instance and that it came from a task step."""
    record = task_record(app, event=step_payload("order", "o-42"))
    page = login("ana", superuser=True).get(change_url(record.id)).content.decode()
    assert "Workflow instance" in page
    assert "order[o-42] (task step)" in page


def test_the_list_names_the_workflow_instance_of_each_record(app: Any) -> None:  # noqa: F811
    """Step messages and task steps show their instance; other records show nothing there."""
    task_record(app, event=step_payload("order", "o-42"))
    task_record(
        app, task_name="xsm.workflow.order", task_args=["o-43", {"id": "m", "kind": "event"}]
    )
    task_record(app, task_args=[8])
    page = login("ana", superuser=True).get(reverse(CHANGELIST)).content.decode()
    assert "order[o-42] (task step)" in page
    assert "order[o-43] (step message)" in page
    assert page.count("order[") == 2


def test_the_replay_page_of_an_undeclared_workflow_says_what_to_import(
    app: Any,  # noqa: F811
) -> None:
    """The dry run cannot check the instance without its workflow: refused, with the fix."""
    record = task_record(app, event=step_payload("nowhere", "k-1"))
    page = login("ana", superuser=True).get(change_url(record.id, "replay")).content.decode()
    assert "task step of workflow nowhere[k-1]" in page
    assert "import the module that calls xsm.workflow(...) for &#x27;nowhere&#x27;" in page
