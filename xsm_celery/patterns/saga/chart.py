"""The chart a ``SagaBuilder`` generates, as plain JSON.

Shape (``fulfil`` with steps ``reserve`` and ``charge``)::

    idle                    only with start_event: START -> steps (sagaStart)
    steps.reserve           invoke reserveStock; onDone -> steps.charge;
                            onError / after timeout_ms -> failure
    steps.reserveRetrying   only with retry=: after the policy's delay -> steps.reserve
    steps.charge            onDone -> completed; failure -> compensating.reserve
    compensating.reserve    invoke releaseStock; onDone -> failed;
                            onError -> compensationFailed
    completed / failed      final
    compensationFailed      final, tagged dead-letter

A failure at step k enters the compensation of the nearest earlier step that declares one
and walks back to the first, then to ``failed``. Compensations exist only for steps that can
have completed before a failure, so the last step's compensation is never generated. Every
step transition carries ``meta.publish`` (``<saga>.<step>.completed`` and so on), so with an
``OutboxPlugin`` the saga announces its own progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xsm_celery.patterns.dead_letter.plugin import DEAD_LETTER_TAG
from xsm_celery.patterns.saga.step import SagaStep

__all__ = [
    "ATTEMPT_PREFIX",
    "COMPENSATE_INVOKE_PREFIX",
    "SAGA_ATTEMPT",
    "SAGA_CAN_RETRY",
    "SAGA_COMPENSATED",
    "SAGA_COMPENSATION_FAILED",
    "SAGA_START",
    "SAGA_STEP_DONE",
    "SAGA_STEP_FAILED",
    "SAGA_STEP_TIMED_OUT",
    "attempt_key",
    "retry_delay_name",
    "retrying_state_name",
    "saga_chart",
]

#: Copies the start event's payload into ``context["input"]``.
SAGA_START = "sagaStart"
#: Counts an attempt of a step in ``context["attempt_<step>"]`` (entry of the step).
SAGA_ATTEMPT = "sagaAttempt"
#: Stores the step's result in ``context["results"][<step>]``.
SAGA_STEP_DONE = "sagaStepDone"
#: Stores the step's error in ``context["error"]``.
SAGA_STEP_FAILED = "sagaStepFailed"
#: Stores a timeout as the step's error and adds it to the dead-letter error chain.
SAGA_STEP_TIMED_OUT = "sagaStepTimedOut"
#: Appends the step to ``context["compensated"]``.
SAGA_COMPENSATED = "sagaCompensated"
#: Stores the compensation's error in ``context["error"]``.
SAGA_COMPENSATION_FAILED = "sagaCompensationFailed"
#: Whether a failed attempt of a ``retry=`` step may run again.
SAGA_CAN_RETRY = "sagaCanRetry"
#: Prefix of the per-step attempt counters in context.
ATTEMPT_PREFIX = "attempt_"
#: Prefix of a compensation's invoke id (a dot no step name can contain keeps them apart).
COMPENSATE_INVOKE_PREFIX = "compensate."


def retrying_state_name(step: str) -> str:
    """The waiting state a ``retry=`` step owns: ``<step>Retrying``."""
    return f"{step}Retrying"


def retry_delay_name(step: str) -> str:
    """The named delay of a step's retry wait: ``<step>RetryDelay``."""
    return f"{step}RetryDelay"


def attempt_key(step: str) -> str:
    """The context key counting a step's attempts: ``attempt_<step>``."""
    return f"{ATTEMPT_PREFIX}{step}"


def _action(name: str, step: str) -> dict[str, Any]:
    return {"type": name, "params": {"step": step}}


def _publish(saga: str, step: str, outcome: str, fields: Sequence[str]) -> dict[str, Any]:
    return {"publish": {"type": f"{saga}.{step}.{outcome}", "data": list(fields)}}


def _failure_target(saga: str, steps: Sequence[SagaStep], index: int) -> str:
    """Where a failure of step ``index`` goes: the nearest earlier compensation, or failed."""
    for earlier in reversed(steps[:index]):
        if earlier.compensate is not None:
            return f"#{saga}.compensating.{earlier.name}"
    return f"#{saga}.failed"


def _failure(saga: str, step: SagaStep, target: str, record: str) -> list[dict[str, Any]]:
    """The guarded transitions out of a failed attempt: retry while allowed, else fail."""
    transitions: list[dict[str, Any]] = []
    if step.retry is not None:
        transitions.append(
            {
                "target": retrying_state_name(step.name),
                "guard": _action(SAGA_CAN_RETRY, step.name),
                "actions": [_action(record, step.name)],
                "meta": _publish(saga, step.name, "retrying", ["error"]),
            }
        )
    transitions.append(
        {
            "target": target,
            "actions": [_action(record, step.name)],
            "meta": _publish(saga, step.name, "failed", ["error"]),
        }
    )
    return transitions


def _step_states(saga: str, steps: Sequence[SagaStep]) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for index, step in enumerate(steps):
        last = index == len(steps) - 1
        target = _failure_target(saga, steps, index)
        state: dict[str, Any] = {
            "entry": [_action(SAGA_ATTEMPT, step.name)],
            "invoke": {
                "id": step.name,
                "src": step.invoke,
                "onDone": {
                    "target": f"#{saga}.completed" if last else steps[index + 1].name,
                    "actions": [_action(SAGA_STEP_DONE, step.name)],
                    "meta": _publish(saga, step.name, "completed", ["results"]),
                },
                "onError": _failure(saga, step, target, SAGA_STEP_FAILED),
            },
        }
        if step.timeout_ms is not None:
            timed_out = _failure(saga, step, target, SAGA_STEP_TIMED_OUT)
            state["after"] = {str(step.timeout_ms): timed_out}
        states[step.name] = state
        if step.retry is not None:
            states[retrying_state_name(step.name)] = {
                "after": {retry_delay_name(step.name): {"target": step.name}}
            }
    return states


def _compensation_states(saga: str, steps: Sequence[SagaStep]) -> dict[str, Any]:
    """One state per step that may need undoing: every step but the last one."""
    states: dict[str, Any] = {}
    for index, step in enumerate(steps[:-1]):
        if step.compensate is None:
            continue
        states[step.name] = {
            "invoke": {
                "id": f"{COMPENSATE_INVOKE_PREFIX}{step.name}",
                "src": step.compensate,
                "onDone": {
                    "target": _failure_target(saga, steps, index),
                    "actions": [_action(SAGA_COMPENSATED, step.name)],
                    "meta": _publish(saga, step.name, "compensated", ["compensated"]),
                },
                "onError": {
                    "target": f"#{saga}.compensationFailed",
                    "actions": [_action(SAGA_COMPENSATION_FAILED, step.name)],
                    "meta": _publish(saga, step.name, "compensationFailed", ["error"]),
                },
            }
        }
    return states


def _context(steps: Sequence[SagaStep]) -> dict[str, Any]:
    context: dict[str, Any] = {"input": None, "results": {}, "compensated": [], "error": None}
    for step in steps:
        context[attempt_key(step.name)] = 0
    return context


def saga_chart(
    saga: str,
    steps: Sequence[SagaStep],
    start_event: str | None,
    failure_actions: Sequence[str],
) -> dict[str, Any]:
    """Generate the chart of a saga; see the module docstring for its shape."""
    states: dict[str, Any] = {}
    if start_event is not None:
        states["idle"] = {
            "on": {start_event: {"target": "steps", "actions": [SAGA_START]}},
        }
    states["steps"] = {"initial": steps[0].name, "states": _step_states(saga, steps)}
    compensating = _compensation_states(saga, steps)
    if compensating:
        initial = next(iter(compensating))
        states["compensating"] = {"initial": initial, "states": compensating}
    failed: dict[str, Any] = {"type": "final"}
    stuck: dict[str, Any] = {"type": "final", "tags": [DEAD_LETTER_TAG]}
    if failure_actions:
        failed["entry"] = list(failure_actions)
        stuck["entry"] = list(failure_actions)
    states["completed"] = {"type": "final"}
    states["failed"] = failed
    states["compensationFailed"] = stuck
    return {
        "id": saga,
        "initial": "idle" if start_event is not None else "steps",
        "context": _context(steps),
        "states": states,
    }
