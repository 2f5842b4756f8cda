"""The generic actions, guards and delays every generated saga chart names.

They are parameterised by the step (``{"type": "sagaStepDone", "params": {"step": ...}}``),
so one small logic serves every step and the chart stays plain JSON. Everything written into
context is JSON (results, step names, ``{step, stage, type, message}`` errors) because it
rides in every snapshot; error messages are masked and cut the way the dead-letter chain's
are. Each outcome is also reported on the fact stream as ``FactKind.SAGA_STEP``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xsm_celery.engine import MachineLogic
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.dead_letter.plugin import DEFAULT_MAX_ERRORS
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY, error_entry
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.saga.chart import (
    SAGA_ATTEMPT,
    SAGA_CAN_RETRY,
    SAGA_COMPENSATED,
    SAGA_COMPENSATION_FAILED,
    SAGA_START,
    SAGA_STEP_DONE,
    SAGA_STEP_FAILED,
    SAGA_STEP_TIMED_OUT,
    attempt_key,
    retry_delay_name,
)
from xsm_celery.patterns.saga.step import SagaStep

__all__ = ["saga_logic"]

Action = Callable[[Any, dict[str, Any], Any, Any], None]


def _step_of(action: Any) -> str:
    params = getattr(action, "params", None)
    step = params.get("step") if isinstance(params, Mapping) else None
    return str(step) if step is not None else "?"


def _attempts(ctx: Mapping[str, Any], step: str) -> int:
    value = ctx.get(attempt_key(step), 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_record(ctx: dict[str, Any], step: str, stage: str, error: object) -> dict[str, str]:
    """The JSON the saga keeps in ``context["error"]`` for one failure."""
    exc = error if isinstance(error, BaseException) else RuntimeError(str(error))
    entry = error_entry("saga", step, exc, context=ctx)
    kind = entry["type"] if isinstance(error, BaseException) else type(error).__name__
    return {"step": step, "stage": stage, "type": kind, "message": entry["message"]}


def _start(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    payload = getattr(event, "payload", None)
    ctx["input"] = dict(payload) if isinstance(payload, Mapping) else {}


def _attempt(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    step = _step_of(action)
    ctx[attempt_key(step)] = _attempts(ctx, step) + 1


def _reporter(saga: str) -> Callable[[str, str], None]:
    def report(step: str, outcome: str) -> None:
        emit(FactKind.SAGA_STEP, saga=saga, step=step, outcome=outcome)

    return report


def _actions(saga: str) -> dict[str, Action]:
    report = _reporter(saga)

    def done(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        step = _step_of(action)
        results = ctx.get("results")
        ctx["results"] = {**(results if isinstance(results, dict) else {}), step: event.data}
        report(step, "completed")

    def failed(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        step = _step_of(action)
        ctx["error"] = _error_record(ctx, step, "step", getattr(event, "data", None))
        report(step, "failed")

    def timed_out(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        step = _step_of(action)
        note = TimeoutError(f"saga step {step!r} timed out; its service result is abandoned")
        ctx["error"] = _error_record(ctx, step, "step", note)
        chain = ctx.get(ERRORS_CONTEXT_KEY)
        chain = list(chain) if isinstance(chain, list) else []
        chain.append(error_entry("saga", step, note, context=ctx))
        ctx[ERRORS_CONTEXT_KEY] = chain[-DEFAULT_MAX_ERRORS:]
        report(step, "timed_out")

    def compensated(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        step = _step_of(action)
        done_list = ctx.get("compensated")
        ctx["compensated"] = [*(done_list if isinstance(done_list, list) else []), step]
        report(step, "compensated")

    def compensation_failed(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        step = _step_of(action)
        ctx["error"] = _error_record(ctx, step, "compensation", getattr(event, "data", None))
        report(step, "compensation_failed")

    return {
        SAGA_START: _start,
        SAGA_ATTEMPT: _attempt,
        SAGA_STEP_DONE: done,
        SAGA_STEP_FAILED: failed,
        SAGA_STEP_TIMED_OUT: timed_out,
        SAGA_COMPENSATED: compensated,
        SAGA_COMPENSATION_FAILED: compensation_failed,
    }


def _can_retry(policies: Mapping[str, RetryPolicy]) -> Callable[..., bool]:
    """Another attempt is allowed: the error is retryable and attempts remain."""

    def can_retry(ctx: dict[str, Any], event: Any, params: Any) -> bool:
        step = str(params.get("step")) if isinstance(params, Mapping) else ""
        policy = policies.get(step)
        if policy is None:
            return False
        if not policy.should_retry(getattr(event, "data", None)):
            return False
        return _attempts(ctx, step) < policy.max_attempts

    return can_retry


def _delay(step: str, policy: RetryPolicy) -> Callable[[dict[str, Any], Any], float]:
    """The wait before the next attempt, after ``attempt_<step>`` attempts failed."""
    previous_key = f"{attempt_key(step)}_delay_ms"

    def delay(ctx: dict[str, Any], event: Any) -> float:
        previous = ctx.get(previous_key)
        if isinstance(previous, bool) or not isinstance(previous, int | float):
            previous = None
        ms = policy.delay_ms(max(1, _attempts(ctx, step)), previous_ms=previous)
        ctx[previous_key] = ms
        return ms

    return delay


def saga_logic(saga: str, steps: Sequence[SagaStep]) -> MachineLogic:
    """The logic a saga's chart names; the steps' own services are merged on top by the user."""
    policies = {step.name: step.retry for step in steps if step.retry is not None}
    return MachineLogic(
        actions=_actions(saga),
        guards={SAGA_CAN_RETRY: _can_retry(policies)},
        delays={retry_delay_name(name): _delay(name, policy) for name, policy in policies.items()},
    )
