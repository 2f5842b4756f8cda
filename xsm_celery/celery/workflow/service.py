"""``celery_service(task)``: a Celery task as an ``invoke`` step of a workflow.

::

    logic = MachineLogic(services={
        "charge": celery_service(charge_card, kwargs=lambda ctx, e: {"order": ctx["order"]}),
    })

When the invoking state is entered during a workflow step, the task is recorded, not sent:
it is dispatched only once the step's transaction commits (a rolled-back step dispatches
nothing), with a fresh task id remembered in the instance's private context. Its result comes
back through Celery's own callbacks: ``link`` is the workflow's step task, which applies
``done.invoke.<id>`` with the task's return value as ``event.data``; ``link_error`` is
``xsm_celery.workflow_failed``, which sends ``error.platform.<id>`` whose data is a
``ServiceTaskFailed``. A completion whose task id is no longer the one the instance waits for
(the state was left, the invocation restarted) is stale: ignored, logged and counted. Leaving
the state revokes the task, best-effort.

A ``ChartTask`` used as a step retries by its own policy: Celery calls ``link_error`` only
when the task fails for good, so the workflow hears of the error once, after the chart task's
own dead letter (which names the workflow and key) was written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery import current_app, shared_task
from kombu.utils.uuid import uuid

from xsm_celery.celery.workflow.messages import DEFAULT_TASK_STEP_TIMEOUT_S, Dispatch
from xsm_celery.celery.workflow.payloads import FAILED_TASK, completion
from xsm_celery.celery.workflow.step import INVOCATIONS_KEY, current_step
from xsm_celery.engine import CallbackLogic, Event, from_callback
from xsm_celery.errors import ConfigurationError, WorkflowStepError
from xsm_celery.patterns.error_chain import truncate_message

__all__ = ["FAILED_TASK", "MAX_TASK_STEP_TIMEOUT_S", "celery_service", "workflow_failed"]

logger = logging.getLogger("xsm_celery.workflow")

#: Longest ``timeout_s``: a week, past which a lost task step would go unnoticed too long.
MAX_TASK_STEP_TIMEOUT_S = 7 * 86_400.0

ArgsFn = Callable[[Any, Event], Sequence[Any]]
KwargsFn = Callable[[Any, Event], Mapping[str, Any]]


def celery_service(
    task: Any,
    *,
    args: ArgsFn | None = None,
    kwargs: KwargsFn | None = None,
    queue: str | None = None,
    timeout_s: float = DEFAULT_TASK_STEP_TIMEOUT_S,
    **options: Any,
) -> CallbackLogic:
    """Make the Celery task ``task`` (a task object or its name) an ``invoke`` src.

    Args:
        task: The task to run; it may live on other workers (then give its name).
        args: ``(ctx, event) -> positional arguments`` of the task; none by default.
        kwargs: ``(ctx, event) -> keyword arguments``; none by default.
        queue: The queue to send it to (Celery's routing otherwise).
        timeout_s: Seconds without a completion after which the Beat scan looks for the
            task (default ten minutes): it applies a result the result backend holds, leaves
            a task the backend sees running, and otherwise sends the task again with the
            same id. Set it above the task's longest run, retries included.
        options: More ``apply_async`` options (``priority``, ``expires``...).

    Raises:
        ConfigurationError: ``task`` is neither a task nor a name, ``args`` / ``kwargs``
            are not callables, or ``timeout_s`` is not a positive number of seconds.
    """
    name = task if isinstance(task, str) else getattr(task, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"celery_service() needs a Celery task or its name, got {task!r}; decorate the "
            "function with @app.task first"
        )
    for label, fn in (("args", args), ("kwargs", kwargs)):
        if fn is not None and not callable(fn):
            raise ConfigurationError(
                f"celery_service({name}) {label}= must be a callable of (ctx, event), got {fn!r}"
            )
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not 1.0 <= timeout_s <= MAX_TASK_STEP_TIMEOUT_S
    ):
        raise ConfigurationError(
            f"celery_service({name}) timeout_s must be seconds from 1 to "
            f"{MAX_TASK_STEP_TIMEOUT_S:g}, got {timeout_s!r}"
        )
    routing = {**options, **({"queue": queue} if queue else {})}
    for reserved in ("task_id", "link", "link_error", "headers"):
        if reserved in routing:
            raise ConfigurationError(
                f"celery_service({name}) sets {reserved} itself; remove {reserved}="
            )

    def setup(send_back: Any, receive: Any, ctx: Any, event: Event) -> None:
        step = current_step()
        if step is None:
            raise WorkflowStepError(
                f"celery_service({name}) runs only inside a workflow step; run the machine "
                "with xsm.workflow(machine) and send it events there"
            )
        invoke_id = str(getattr(getattr(send_back, "__self__", None), "id", "") or name)
        call_args = list(args(ctx, event)) if args is not None else []
        call_kwargs = dict(kwargs(ctx, event)) if kwargs is not None else {}
        task_id = uuid()
        ctx.setdefault(INVOCATIONS_KEY, {})[invoke_id] = task_id
        dispatch = Dispatch(
            invoke_id,
            name,
            call_args,
            call_kwargs,
            task_id,
            dict(routing),
            step.key,
            timeout_s=float(timeout_s),
        )
        step.dispatches.append(dispatch)

    return from_callback(setup)


@shared_task(name=FAILED_TASK, ignore_result=True)
def workflow_failed(*args: Any) -> None:
    """Errback of a task step: send ``error.platform.<id>`` to the workflow instance.

    Celery calls it in the failing worker as ``(request, exc, traceback, *ours)`` when this
    task is registered there, else sends it as ``(failed task id, *ours)``; the error is then
    read from the result backend when there is one.
    """
    if len(args) >= 8 and isinstance(args[1], BaseException):
        request, exc = args[0], args[1]
        ours = args[3:8]
        info: dict[str, Any] = {
            "task": str(getattr(request, "task", "") or ""),
            "type": type(exc).__name__,
            "message": truncate_message(str(exc)),
            # Celery counts a task's retries (a ChartTask's too): the runs it made.
            "attempts": int(getattr(request, "retries", 0) or 0) + 1,
        }
    elif len(args) == 6:
        ours = args[1:6]
        info = _from_backend(str(args[0]))
    else:
        logger.error("workflow_failed called with unexpected arguments %r; ignored", args)
        return
    name, key, invoke_id, task_id, queue = ours
    message = completion("error", str(key), str(invoke_id), str(task_id), info)
    from xsm_celery.celery.workflow.api import WORKFLOW_TASK_PREFIX

    current_app.send_task(
        f"{WORKFLOW_TASK_PREFIX}{name}",
        args=[key, message],
        **({"queue": queue} if queue else {}),
    )


def _from_backend(task_id: str) -> dict[str, str]:
    """The failure of ``task_id`` as the result backend kept it, if it kept it."""
    try:
        result = current_app.AsyncResult(task_id)
        exc = result.result
        name = str(getattr(result, "name", "") or "")
    except Exception as error:
        return {"task": "", "type": "Unknown", "message": f"no result backend to read: {error}"}
    if isinstance(exc, BaseException):
        return {"task": name, "type": type(exc).__name__, "message": truncate_message(str(exc))}
    return {"task": name, "type": "Unknown", "message": truncate_message(str(exc))}
