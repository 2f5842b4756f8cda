"""Carry out one run of a chart task: read the message, run its attempt, act on the verdict.

The run goes one way: :func:`execute` reads the ``xsm_chart`` header and prepares the
:class:`~xsm_celery.celery.task.attempt.Run` (what to call, where to mark the attempt, whether
an earlier attempt was lost); ``attempt.run_chart`` carries the attempt out, directly or
through the chart, and returns where it settled; :func:`execute` then returns the result or
raises what the verdict says (control flow, a retry, or giving up with a dead letter).

Everything that can be computed once per task (the machine, the policy, the settings, the
function's signature) is in ``Bound``. A redelivered message (``delivery_info['redelivered']``,
set by both the Redis and the AMQP transports) consults the attempt marker: if the attempt it
carries had started, the worker died running it, and the run records a ``WorkerLost`` failure
instead of running the function again.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, assert_never

from xsm_celery.celery.deadletter.canvas import canvas_of
from xsm_celery.celery.deadletter.spool import DeadLetterSpool, run_id
from xsm_celery.celery.deadletter.writer import DeadLetterWriter, TaskFailure
from xsm_celery.celery.settings import XsmSettings
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.task.attempt import DirectAttempt, Run, Settled, Verdict, run_chart
from xsm_celery.celery.task.facts import AttemptFacts
from xsm_celery.celery.task.header import HEADER, ChartHeader, HeaderCodec
from xsm_celery.celery.task.secrets import mask_context_errors, mask_exception
from xsm_celery.celery.task.time_limits import lost_attempt_error
from xsm_celery.celery.task.tracer import ChartRetry, chart_retry
from xsm_celery.celery.worker.timers import schedule_retry
from xsm_celery.engine import Machine
from xsm_celery.errors import TaskGaveUp
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns import RetryPolicy

__all__ = ["HEADER", "Bound", "execute"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bound:
    """A chart task's per-process constants, built when Celery binds the task."""

    app: Any
    machine: Machine
    policy: RetryPolicy
    codec: HeaderCodec
    settings: XsmSettings
    signature: inspect.Signature | None
    redact_keys: tuple[str, ...] | None
    #: The attempts that may run before the chart (see ``machine.first_attempt``), or None.
    first: DirectAttempt | None = None

    @functools.cached_property
    def reject(self) -> Callable[[str, str], None]:
        """The codec's ``reject``, bound once rather than on every run that passes it on."""
        return self.codec.reject

    @functools.cached_property
    def writer(self) -> DeadLetterWriter:
        """Writes this task's dead letters to the app's store (opened on first use)."""
        return DeadLetterWriter(
            lambda: stores_for(self.app).dead_letters(),
            self.signature,
            self.redact_keys,
            spool=DeadLetterSpool(self.settings.dead_letter_spool),
        )


def execute(
    task: Any,
    bound: Bound,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    request: Any = None,
) -> Any:
    """Run one attempt of ``task`` and return, retry or fail as the chart says.

    A retry is raised as a ``ChartRetry``, which the chart task's tracer records without
    copying its traceback (see ``tracer``), so it costs the same wherever it is raised.
    ``request`` is ``task.request`` when the caller has it already: Celery finds the request
    through a thread-local stack, a walk worth doing once per run.
    """
    if request is None:
        request = task.request
    header = bound.codec.decode(request.headers, str(request.id))
    facts = AttemptFacts.start(task, _attempt_of(header), request)
    try:
        run = _run_of(task, bound, args, kwargs, request, header=header)
        settled = run_chart(bound.machine, header, run, bound.reject, first=bound.first)
        verdict = settled.verdict
        if facts is not None:
            facts.settled(verdict.value, run.error)
        if verdict is Verdict.DONE:
            return run.result
        if verdict is Verdict.CONTROL:
            raise _control(run)
        if verdict is Verdict.GIVE_UP:
            raise _give_up(task, bound, settled, args, kwargs)
        if verdict is Verdict.RETRY:
            raise _retry(task, bound, settled, args, kwargs)
        assert_never(verdict)
    finally:
        if facts is not None:
            facts.finish()


def _run_of(
    task: Any,
    bound: Bound,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    request: Any,
    *,
    header: ChartHeader | None,
) -> Run:
    """The run this message asks for: the call, its attempt marker, and a lost attempt if any.

    An eager run marks nothing. A redelivered message whose attempt had started records that
    attempt as lost instead of running it again (or ends the task, if it was giving up).
    """
    run = Run(task.run, args, kwargs)
    if not request.is_eager:
        markers = stores_for(bound.app).markers()
        run.mark = functools.partial(markers.mark, request.id)
        if request.delivery_info and request.delivery_info.get("redelivered"):
            run.lost = _lost_attempt(task, markers, header)
            if run.lost is not None:
                _finish_interrupted_give_up(task, bound, header)
    return run


def _control(run: Run) -> BaseException:
    assert run.control is not None
    return run.control


def _lost_attempt(task: Any, markers: Any, header: ChartHeader | None) -> BaseException | None:
    """A ``WorkerLost`` if this redelivered message's attempt had started, else None."""
    attempt = _attempt_of(header)
    try:
        started = markers.started(task.request.id)
    except Exception:
        logger.warning(
            "could not read the attempt marker of %s[%s]; running the redelivered message "
            "as a new attempt",
            task.name,
            task.request.id,
            exc_info=True,
        )
        return None
    if started is None or int(started) < attempt:
        return None
    return lost_attempt_error(markers, str(task.name), str(task.request.id), attempt)


def _attempt_of(header: ChartHeader | None) -> int:
    """The attempt this run makes: one more than the header's counter (1 without one)."""
    return (0 if header is None else header.attempt) + 1


def _finish_interrupted_give_up(task: Any, bound: Bound, header: ChartHeader | None) -> None:
    """End the task if the lost attempt had given up and was writing its dead letter."""
    task_id = run_id(str(task.request.id), _workflow_of(task.request))
    record_id = bound.writer.resume(task_id, _attempt_of(header))
    if record_id is not None:
        raise TaskGaveUp(
            f"task {task.name}[{task.request.id}] gave up before its worker died; its dead "
            f"letter {record_id} is written"
        )


def _give_up(
    task: Any, bound: Bound, settled: Settled, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> BaseException:
    run, machine, interp = settled.run, bound.machine, settled.interpreter
    assert interp is not None  # giving up is always the chart's decision
    error = run.error
    bound.writer.write(
        TaskFailure.of_task(
            task,
            machine,
            args,
            kwargs,
            state_id=str(settled.state_id),
            event_type=_event_type(machine),
            snapshot=json.loads(interp.get_snapshot()),
            error=error,
            retryable=error is None or bound.policy.should_retry(error),
            canvas=canvas_of(task.request),
            workflow=_workflow_of(task.request),
        )
    )
    attempt = interp.context.get("attempt")
    emit(
        FactKind.GAVE_UP,
        task=str(task.name),
        task_id=str(task.request.id),
        exception=_type_name(error),
        attempt=attempt,
    )
    if error is None:
        return TaskGaveUp(
            f"task {task.name}[{task.request.id}] entered dead-letter state "
            f"{settled.state_id!r} without an error; its dead letter is in the store"
        )
    return error


def _event_type(machine: Machine) -> str:
    for invoke in machine.invokes:
        if invoke.src == "work":
            return str(invoke.error_type)
    return "error.platform.work"


def _retry(
    task: Any, bound: Bound, settled: Settled, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> BaseException:
    interp = settled.interpreter
    assert settled.delay_ms is not None
    assert interp is not None  # a retry is always the chart's decision
    delay_s = settled.delay_ms / 1000.0
    secrets = bound.writer.secrets(args, kwargs)
    mask_context_errors(interp.context, secrets)  # the interpreter ends with this run
    snapshot = interp.get_snapshot()
    headers: dict[str, Any] = dict(bound.codec.encode(snapshot, str(task.request.id)))
    workflow = _workflow_of(task.request)
    if workflow is not None:
        headers[WORKFLOW_HEADER] = workflow
    error = settled.run.error
    mask_exception(error, secrets)
    durable = delay_s > bound.settings.timer_countdown_max_s
    emit(
        FactKind.RETRY_SCHEDULED,
        task=str(task.name),
        task_id=str(task.request.id),
        exception=_type_name(error),
        delay_s=delay_s,
        durable=durable,
        attempt=interp.context.get("attempt"),
    )
    emit(FactKind.OUTBOUND, carrier=headers)
    if not durable:
        scheduled = task.retry(countdown=delay_s, exc=error, headers=headers, throw=False)
        return chart_retry(scheduled)
    due = time.time() + delay_s
    request = task.request
    schedule_retry(
        task.app,
        task_name=str(task.name),
        task_id=str(request.id),
        args=list(args),
        kwargs=dict(kwargs),
        headers=headers,
        retries=int(request.retries) + 1,
        due_at=due,
        options=_route(request),
    )
    emit(FactKind.TIMER_SCHEDULED, task=str(task.name), delay_s=delay_s, purpose="retry")
    cause = error if isinstance(error, Exception) else None
    return ChartRetry(exc=cause, when=datetime.fromtimestamp(due, tz=timezone.utc))


def _type_name(error: BaseException | None) -> str | None:
    return None if error is None else type(error).__name__


def _route(request: Any) -> dict[str, Any]:
    """Where the retry goes: the queue the message came from, as ``Task.retry`` does."""
    info = request.delivery_info or {}
    routing_key, exchange = info.get("routing_key"), info.get("exchange")
    if exchange == "" and routing_key:
        return {"queue": routing_key}
    return {k: v for k, v in (("exchange", exchange), ("routing_key", routing_key)) if v}


#: Message header naming the workflow instance that dispatched a task as one of its steps.
WORKFLOW_HEADER = "xsm_workflow"


def _workflow_of(request: Any) -> dict[str, str] | None:
    """``{workflow, key}`` of the workflow step that sent this task, if one did."""
    raw = getattr(request, WORKFLOW_HEADER, None)
    if raw is None:
        raw = (getattr(request, "headers", None) or {}).get(WORKFLOW_HEADER)
    if isinstance(raw, dict) and isinstance(raw.get("workflow"), str):
        found = {"workflow": str(raw["workflow"]), "key": str(raw.get("key", ""))}
        if isinstance(raw.get("replay"), str) and raw["replay"]:
            found["replay"] = str(raw["replay"])[:64]
        return found
    return None
