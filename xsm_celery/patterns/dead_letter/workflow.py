"""The workflow instance a dead letter belongs to, read from the record alone.

Three kinds of record belong to a durable workflow, and each names its instance its own way:

* a **step message** that failed for good: its task is ``xsm.workflow.<name>`` and its first
  argument is the instance's key (``task_args == [key, message]``);
* a **task step** (a ``ChartTask`` a workflow dispatched) that gave up: the task carried the
  ``xsm_workflow`` header, and its dead letter's ``event['payload']`` keeps
  ``{"workflow": name, "key": key}``;
* a **dead-letter state** the instance entered (a saga's ``compensationFailed``): its topic
  is ``workflow:<name>:<key>``.

Operators triage by instance ("what happened to order o-42?"), so the CLI and the Django
admin show this next to the task name, and a replay uses it to go through the workflow.
It lives in the core, not beside ``Workflow``, so that listing dead letters needs no Celery.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from xsm_celery.patterns.dead_letter.record import DeadLetter

__all__ = [
    "STEP_TASK_PREFIX",
    "WORKFLOW_TOPIC_PREFIX",
    "WorkflowPart",
    "WorkflowRef",
    "workflow_of_record",
    "workflow_topic",
]

#: Prefix of a workflow's step task name. The same string as
#: ``xsm_celery.celery.workflow.WORKFLOW_TASK_PREFIX`` (a test keeps them equal); repeated
#: here because the core does not import the Celery integration.
STEP_TASK_PREFIX = "xsm.workflow."

#: Prefix of the topic of a dead-letter state's record (``workflow:<name>:<key>``).
WORKFLOW_TOPIC_PREFIX = "workflow:"


def workflow_topic(workflow: str, key: str) -> str:
    """The topic of a workflow instance's dead letters: ``workflow:<name>:<key>``."""
    return f"{WORKFLOW_TOPIC_PREFIX}{workflow}:{key}"


class WorkflowPart(enum.Enum):
    """Which part of a workflow a dead letter came from; it decides how it replays."""

    #: A message to the instance (event, start, timer, completion): it replays as itself.
    STEP_MESSAGE = "step message"
    #: A Celery task the instance dispatched: it replays only while the instance waits for it.
    TASK_STEP = "task step"
    #: A dead-letter state the instance entered: nothing to send again.
    DEAD_LETTER_STATE = "dead-letter state"


@dataclass(frozen=True)
class WorkflowRef:
    """A workflow instance, and the part of it a dead letter came from."""

    workflow: str
    key: str
    part: WorkflowPart

    def __str__(self) -> str:
        return f"{self.workflow}[{self.key}]"


def workflow_of_record(record: DeadLetter) -> WorkflowRef | None:
    """The workflow instance ``record`` belongs to, or None for any other dead letter."""
    name = record.task_name or ""
    if name.startswith(STEP_TASK_PREFIX) and len(name) > len(STEP_TASK_PREFIX):
        args = record.task_args or []
        key = args[0] if args and isinstance(args[0], str) else ""
        return WorkflowRef(name[len(STEP_TASK_PREFIX) :], key, WorkflowPart.STEP_MESSAGE)
    if name:
        payload = (record.event or {}).get("payload")
        workflow, key = _names(payload)
        if workflow:
            return WorkflowRef(workflow, key, WorkflowPart.TASK_STEP)
        return None
    topic = record.topic or ""
    if topic.startswith(WORKFLOW_TOPIC_PREFIX):
        workflow, _, key = topic[len(WORKFLOW_TOPIC_PREFIX) :].partition(":")
        if workflow:
            return WorkflowRef(workflow, key, WorkflowPart.DEAD_LETTER_STATE)
    return None


def _names(payload: Any) -> tuple[str, str]:
    if not isinstance(payload, dict):
        return "", ""
    workflow, key = payload.get("workflow"), payload.get("key")
    if not isinstance(workflow, str):
        return "", ""
    return workflow, key if isinstance(key, str) else ""
