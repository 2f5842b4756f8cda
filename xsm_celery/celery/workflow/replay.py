"""Replaying a workflow's dead letter through its instance, not around it.

``replay_task`` (CLI, Django admin) calls here for a record that belongs to a workflow
(``workflow_of_record``):

* a **step message** is sent to the instance again, as any task is replayed: the inbox has
  no receipt of a step that never committed, so it applies once;
* a **task step** is sent again only while the instance still waits for it, with the *same*
  task id and the workflow's ``link`` / ``link_error``. A fresh id would be a stranger to the
  instance: its completion would be ignored as stale, and leaving the state could not revoke
  it. An instance that moved on (the step's error already took it elsewhere, or it was
  cancelled) is refused with the state it is in, since its completion would change nothing.

The check reads the stored snapshot without its lock: a completion that arrives after the
instance moved on in between is ignored as stale, like any late completion. The task goes to
Celery's routing for its name; a ``celery_service(queue=...)`` is not in the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.workflow.api import workflows_of
from xsm_celery.celery.workflow.step import Dispatch
from xsm_celery.errors import ReplayRefusedError
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.patterns.dead_letter.workflow import WorkflowPart, WorkflowRef, workflow_of_record

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.api import Workflow
    from xsm_celery.celery.workflow.view import WorkflowView

__all__ = [
    "TaskStepReplay",
    "WorkflowRef",
    "describe_step_message",
    "replay_task_step",
    "workflow_of_record",
]


@dataclass(frozen=True)
class TaskStepReplay:
    """A task step that may be sent again: the instance waits for ``dispatch.task_id``."""

    workflow: Workflow
    ref: WorkflowRef
    dispatch: Dispatch
    #: The dead letter replayed: sent along, so a give-up of the replay is a record of its own.
    record_id: str = ""

    def describe(self) -> str:
        """What sending does, for a dry run's outcome."""
        return (
            f"would send task step {self.dispatch.task_name} of workflow {self.ref} again as "
            f"task {self.dispatch.task_id} (the id the instance waits for on invoke "
            f"{self.dispatch.invoke_id!r}) with args={self.dispatch.args!r} "
            f"kwargs={self.dispatch.kwargs!r}; its result goes to the instance"
        )

    def send(self) -> str:
        """Publish the task with its workflow callbacks; return its (unchanged) task id."""
        task_id = self.dispatch.task_id
        payload = self.workflow.dispatch_payload(self.dispatch, replay_of=self.record_id)
        self.workflow.send_payload(task_id, payload)
        return task_id


def replay_task_step(app: Any, record: DeadLetter, ref: WorkflowRef) -> TaskStepReplay:
    """The replay of task step ``record``, checked against its instance; nothing is sent.

    Raises:
        ReplayRefusedError: the workflow is not declared in this process, the instance is
            gone, or it no longer waits for this task.
    """
    if ref.part is not WorkflowPart.TASK_STEP:
        raise ReplayRefusedError(
            f"{ref} of dead letter {record.id} is a {ref.part.value}, not a task step; "
            "replay it with replay_task()"
        )
    workflow = _declared(app, record, ref)
    task_id = str(record.task_id or "")
    view = workflow.get(ref.key) if ref.key else None
    if view is None:
        raise ReplayRefusedError(
            f"dead letter {record.id} is task step {record.task_name}[{task_id}] of workflow "
            f"{ref}, but that instance is not in the workflow's store; nothing waits for the "
            "task, so it is not sent - resolve the dead letter instead"
        )
    invoke_id = _waiting_invoke(view, task_id)
    if invoke_id is None:
        raise ReplayRefusedError(_moved_on(record, ref, view))
    dispatch = Dispatch(
        invoke_id=invoke_id,
        task_name=str(record.task_name),
        args=list(record.task_args or []),
        kwargs=dict(record.task_kwargs or {}),
        task_id=task_id,
        options={},
        key=ref.key,
    )
    return TaskStepReplay(workflow, ref, dispatch, record.id)


def describe_step_message(ref: WorkflowRef, record: DeadLetter) -> str:
    """What replaying a step message does, for a dry run's outcome."""
    args = record.task_args or []
    message = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
    what = " ".join(str(message.get(k)) for k in ("kind", "type") if message.get(k)) or "message"
    return (
        f"would send {what} {message.get('id', '?')} to workflow {ref} again "
        f"({record.task_name} with args={list(args)!r}); a step that never committed applies "
        "once, one the inbox already has is answered from it"
    )


def _declared(app: Any, record: DeadLetter, ref: WorkflowRef) -> Workflow:
    # The replaying app's own workflow: another app's of the same name may use another store.
    workflow = workflows_of(app).get(ref.workflow)
    if workflow is None:
        raise ReplayRefusedError(
            f"dead letter {record.id} is a task step of workflow {ref}, which is not declared "
            f"on app {getattr(app, 'main', app)!r} in this process; import the module that "
            f"calls xsm.workflow(...) for "
            f"{ref.workflow!r} (add it to the Celery app's imports= or include=, or point "
            "--app / XSM_CELERY['CELERY_APP'] at a module that imports it), then replay again"
        )
    return workflow


def _waiting_invoke(view: WorkflowView, task_id: str) -> str | None:
    if view.status != "running" or not task_id:
        return None
    return next((i for i, waited in sorted(view.waiting_for.items()) if waited == task_id), None)


def _moved_on(record: DeadLetter, ref: WorkflowRef, view: WorkflowView) -> str:
    states = ", ".join(sorted(view.state_ids)) or "no state"
    waits = ", ".join(f"{i!r} -> {t}" for i, t in sorted(view.waiting_for.items())) or "nothing"
    return (
        f"workflow {ref} no longer waits for task {record.task_name}[{record.task_id}] of dead "
        f"letter {record.id}: it is in {states} (value {view.value!r}, status {view.status}) "
        f"and waits for {waits}; a replay's result would be ignored as stale - send the "
        "instance an event instead (the admin's Send event, or workflow.send), then resolve "
        "this dead letter"
    )
