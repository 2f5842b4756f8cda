"""Every message a workflow sends, built in one place: timers, task steps, completions.

A message that a step sends after its commit is also a row in the workflow's timer store,
written in the step's transaction, so a message the broker loses (a SIGKILLed worker holding
a countdown, a Redis restart, a callback never sent) is sent again by the Beat scan
(``recovery``). Row and message therefore share one shape, the send spec that
``fire_due_timers`` publishes: ``{task, args, kwargs, headers, retries, options}``, plus
``RECOVERY_KEY`` telling the scan what the row stands for.

A timer's task id is derived from what the timer is (instance, state, event, due time), so
the step that fires or cancels the timer finds its row without having stored the id, and a
re-published timer is the same message (the inbox answers a second delivery).
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.task.execute import WORKFLOW_HEADER
from xsm_celery.celery.worker.timers import RECOVERY_KEY
from xsm_celery.celery.workflow.messages import Dispatch, Message

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.context import StepContext

__all__ = [
    "FAILED_TASK",
    "RECOVERY_KEY",
    "completion",
    "deadline_id",
    "dispatch_spec",
    "send_spec",
    "spec",
    "routing",
    "timer_spec",
    "timer_task_id",
]

#: Name of the errback that turns a task step's failure into ``error.platform.<id>``.
FAILED_TASK = "xsm_celery.workflow_failed"


_TIMER_NAMESPACE = uuid.UUID("6f1d2c3e-7a4b-4c5d-9e8f-0a1b2c3d4e5f")


def spec(
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    headers: dict[str, Any],
    options: dict[str, Any],
) -> dict[str, Any]:
    """The shape ``fire_due_timers`` publishes a row's payload with."""
    return {
        "task": task,
        "args": args,
        "kwargs": kwargs,
        "headers": headers,
        "retries": 0,
        "options": options,
    }


def deadline_id(deadline: dict[str, Any]) -> tuple[str, str, float]:
    """What tells one pending timer apart: its state, its event and its due time."""
    return (
        str(deadline.get("state_id")),
        str(deadline.get("event_type")),
        round(float(deadline.get("due_at_wall") or 0.0), 3),
    )


def timer_task_id(workflow: str, key: str, deadline: dict[str, Any]) -> str:
    """The task id (and inbox id) of the message that fires one timer of one instance."""
    state, event, due = deadline_id(deadline)
    return str(uuid.uuid5(_TIMER_NAMESPACE, f"{workflow}\x00{key}\x00{state}\x00{event}\x00{due}"))


def routing(queue: str | None) -> dict[str, Any]:
    """The ``apply_async`` options that send a message to ``queue`` (Celery's routing if None)."""
    return {"queue": queue} if queue else {}


def timer_spec(ctx: StepContext, key: str, deadline: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The task id and send spec of the message that fires one ``after`` timer."""
    task_id = timer_task_id(ctx.name, key, deadline)
    due = float(deadline["due_at_wall"])
    message = Message(
        task_id,
        "timer",
        type=str(deadline.get("event_type")),
        payload={"state_id": str(deadline.get("state_id"))},
        due_at=due,
    )
    payload = spec(ctx.task.name, [key, message.to_dict()], {}, {}, routing(ctx.queue))
    payload[RECOVERY_KEY] = {"kind": "timer", "key": key, "due_at": due}
    return task_id, payload


def completion(
    kind: str, key: str, invoke_id: str, task_id: str, data: Any = None
) -> dict[str, Any]:
    """The step message of a task step's result (``done``) or failure (``error``)."""
    return Message(
        f"{kind}:{task_id}", kind, invoke=invoke_id, dispatch=task_id, data=data
    ).to_dict()


def dispatch_spec(
    ctx: StepContext, dispatch: Dispatch, *, sent_at: float, replay_of: str = ""
) -> dict[str, Any]:
    """The send spec of a task step, with the callbacks that bring its result back.

    ``replay_of`` names the dead letter an operator replays: the task keeps its id (the
    instance waits for it), so the record id tells a give-up of the replay from the first.
    """
    key = dispatch.key
    done = completion("done", key, dispatch.invoke_id, dispatch.task_id)
    link = ctx.task.signature((key, done), **routing(ctx.queue))
    errback = ctx.app.signature(
        FAILED_TASK,
        args=(ctx.name, key, dispatch.invoke_id, dispatch.task_id, ctx.queue),
    )
    options = {**dispatch.options, "link": [dict(link)], "link_error": [dict(errback)]}
    owner = {"workflow": ctx.name, "key": key, **({"replay": replay_of} if replay_of else {})}
    headers = {WORKFLOW_HEADER: owner}
    payload = spec(dispatch.task_name, dispatch.args, dispatch.kwargs, headers, options)
    payload[RECOVERY_KEY] = {
        "kind": "dispatch",
        "key": key,
        "invoke": dispatch.invoke_id,
        "timeout_s": dispatch.timeout_s,
        "sent_at": sent_at,
    }
    return payload


def send_spec(
    app: Any, task_id: str, payload: dict[str, Any], *, countdown: float | None = None
) -> None:
    """Publish a send spec as ``fire_due_timers`` would, optionally after ``countdown``."""
    options = dict(payload.get("options") or {})
    if countdown:
        options["countdown"] = countdown
    name = str(payload["task"])
    local = app.tasks.get(name)
    send = local.apply_async if local is not None else partial(app.send_task, name)
    send(
        args=payload.get("args") or [],
        kwargs=payload.get("kwargs") or {},
        task_id=task_id,
        headers=payload.get("headers") or {},
        **options,
    )
