"""Admission before a chart task's body runs: breaker, fleet rate, fleet slot; else defer.

``run_admitted`` is the call ``ChartTask`` makes (``run_breaker_guarded`` when the task has
only ``breaker=``, its hot path), handing it the run to make once admitted (``execute``):
admission never reaches into the run itself. It asks, in this order, the breaker
(cheap while closed: no Redis round trip), the rate limiter and the slot pool. A "no" that
would be answered within ``xsm_fleet_max_wait_ms`` (250 ms by default) is waited out in
place; the worker slot is never held longer than that. Any longer "no" defers the task:

* the same message (same task id, arguments, chart header, so the same attempt count) is
  published again with a countdown to the moment the token, slot or cooldown end is
  expected, plus jitter, and this delivery ends with Celery's ``Ignore``: no attempt of the
  retry policy is used and no retry counter moves;
* it is visible: the result state ``DEFERRED`` (with the reason and countdown in its meta),
  the ``task_deferred`` signal, an INFO log line, and a ``LIMIT_DEFERRED`` fact;
* a task whose first deferral is older than ``xsm_fleet_max_deferral_s`` is dead-lettered
  with the reason ``deferred_too_long`` instead of deferred again.

Redis down is each option's stated choice (``on_redis_down``): ``"open"`` runs the task,
logs a warning (at most every 10 s per option) and counts it in ``FLEET_COUNTERS``;
``"closed"`` defers it by 1-2 s. Neither raises, so neither costs an attempt.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery.exceptions import Ignore, Reject, Retry
from celery.utils.dispatch import Signal

from xsm_celery.celery.deadletter.writer import TaskFailure
from xsm_celery.celery.fleet.headers import (
    DEFERRAL_HEADER,
    FLEET_COUNTERS,
    RESERVATION_HEADER,
    deferral_history,
    ignored,
    reservation_claim,
)
from xsm_celery.celery.fleet.plan import FleetPlan
from xsm_celery.errors import CircuitOpenError, DeferredTooLongError, StoreUnavailableError
from xsm_celery.hooks import FactKind, emit

__all__ = [
    "DEFERRAL_HEADER",
    "Body",
    "DEFERRED_STATE",
    "FLEET_COUNTERS",
    "RESERVATION_HEADER",
    "jittered_countdown",
    "run_admitted",
    "run_breaker_guarded",
    "task_deferred",
]

logger = logging.getLogger(__name__)

#: The result state of a task waiting for a token, a slot or a breaker's cooldown.
DEFERRED_STATE = "DEFERRED"

#: Sent when a task is deferred: ``sender`` is the task, with ``request``, ``reason``
#: (``rate_limited``, ``no_slot``, ``breaker_open``, ``redis_down``), ``limit`` (its name)
#: and ``countdown`` (seconds).
task_deferred = Signal(
    name="xsm_task_deferred", providing_args=["request", "reason", "limit", "countdown"]
)

#: The run an admitted delivery makes: ``body(task, bound, args, kwargs, request)``.
Body = Callable[[Any, Any, Sequence[Any], Mapping[str, Any], Any], Any]

_warned: dict[str, float] = {}
_warn_lock = threading.Lock()
_CONTROL = (Ignore, Reject)


@dataclass
class _Held:
    """What an admitted run must give back when it ends."""

    breaker: Any = None
    breaker_pass: Any = None
    lease: Any = None
    started_ms: float = 0.0
    #: The names of the limits that admitted this run (breaker, rate key, slot key).
    limits: tuple[str, ...] = ()


class _Defer(Exception):
    """Internal: this delivery must be deferred (never escapes ``run_admitted``)."""

    def __init__(self, reason: str, limit: str, wait_ms: float, *, reserved: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.limit = limit
        self.wait_ms = wait_ms
        #: The rate limiter reserved this caller's token: the deferred message carries it.
        self.reserved = reserved


def jittered_countdown(wait_ms: float, rng: Callable[[], float] = random.random) -> float:
    """Seconds to wait: the expected moment, jittered by up to +-5 % (10 to 50 ms).

    The limiter already spreads deferred callers over distinct future tokens or slots,
    so the jitter only has to break ties; keeping it small keeps each caller near its own
    turn. One that wakes a little early waits the rest inline (within the wait bound).
    """
    wait_s = max(0.0, wait_ms) / 1000.0
    spread = min(0.05, max(0.01, wait_s * 0.1))
    return max(0.0, wait_s + (rng() - 0.5) * spread)


def run_admitted(  # noqa: PLR0917 - the run's parts, as ChartTask.__call__ has them
    task: Any, plan: FleetPlan, bound: Any, args: Any, kwargs: Any, request: Any, *, body: Body
) -> Any:
    """Admit this delivery and run ``body``, or defer it (see the module docstring)."""
    held = _Held()
    call_args, call_kwargs = tuple(args), dict(kwargs)
    headers = request.headers or {}
    claim = reservation_claim(headers, plan.task_name) if RESERVATION_HEADER in headers else None
    reserve_max_ms = bound.settings.timer_countdown_max_s * 1000.0
    asked = _Asked(str(request.id or ""), claim, reserve_max_ms)
    try:
        _admit(plan, held, call_args, call_kwargs, asked)
    except _Defer as defer:
        _release(plan, held, failed=False, outcome="ignored")
        raise _deferral(
            task, plan, bound=bound, args=call_args, kwargs=call_kwargs, defer=defer
        ) from None
    if DEFERRAL_HEADER in headers:
        _forget_deferrals(plan, asked.task_id)
    for name in held.limits:
        emit(FactKind.LIMIT_ADMITTED, limit=name, task=plan.task_name)
    held.started_ms = time.monotonic() * 1000.0
    try:
        result = body(task, bound, args, kwargs, request)
    except BaseException as exc:
        outcome = _outcome_of(exc)
        _release(plan, held, failed=outcome == "failure", outcome=outcome)
        raise
    _release(plan, held, failed=False, outcome="success")
    return result


@dataclass(frozen=True, slots=True)
class _Asked:
    """What one delivery brings to admission besides its arguments."""

    task_id: str
    #: The limit a reservation header points at (checked against Redis, never trusted).
    claim: str | None
    reserve_max_ms: float


def _forget_deferrals(plan: FleetPlan, task_id: str) -> None:
    """An admitted task's deferral history is done with; a later retry starts its own."""
    if not task_id:
        return
    try:
        plan.records().forget_deferrals(task_id)
    except StoreUnavailableError:
        logger.debug("could not drop the deferral history of %s", task_id, exc_info=True)


def _outcome_of(exc: BaseException) -> str:
    """What a run that raised ``exc`` reports: a failure, or nothing (Celery control flow)."""
    if isinstance(exc, _CONTROL):
        return "ignored"
    if isinstance(exc, Retry):
        return "failure" if exc.exc is not None else "ignored"
    return "failure"


def run_breaker_guarded(  # noqa: PLR0917 - the run's parts, as ChartTask.__call__ has them
    task: Any, plan: FleetPlan, bound: Any, args: Any, kwargs: Any, request: Any, *, body: Body
) -> Any:
    """One step of a task with only ``breaker=``: the hot path, no allocation while closed.

    A retry the chart schedules is reported to the breaker as the failure it is.
    """
    breaker = plan.breaker()
    try:
        admitted = breaker.admit()
    except CircuitOpenError as exc:
        defer = _Defer("breaker_open", breaker.name, exc.retry_after_ms or 1_000.0)
        raise _deferral(
            task, plan, bound=bound, args=tuple(args), kwargs=dict(kwargs), defer=defer
        ) from None
    except StoreUnavailableError as exc:
        try:
            _redis_down(plan.breaker_down, "breaker", breaker.name, exc)
        except _Defer as defer:
            raise _deferral(
                task, plan, bound=bound, args=tuple(args), kwargs=dict(kwargs), defer=defer
            ) from None
        return body(task, bound, args, kwargs, request)
    emit(FactKind.LIMIT_ADMITTED, limit=breaker.name, task=plan.task_name)
    try:
        result = body(task, bound, args, kwargs, request)
    except BaseException as exc:
        _report(plan, breaker, admitted, _outcome_of(exc))
        raise
    _report(plan, breaker, admitted, "success")
    return result


def _report(plan: FleetPlan, breaker: Any, admitted: Any, outcome: str) -> None:
    try:
        breaker.record(admitted, outcome)
    except StoreUnavailableError as exc:
        logger.warning("could not report to fleet breaker %r: %s", plan.breaker_name, exc)


def _admit(
    plan: FleetPlan, held: _Held, args: tuple[Any, ...], kwargs: dict[str, Any], asked: _Asked
) -> None:
    deadline = time.monotonic() + plan.settings.max_wait_ms / 1000.0
    if plan.breaker_name is not None:
        _admit_breaker(plan, held)
        held.limits += (plan.breaker_name,)
    if plan.rate is not None:
        name = plan.name_for(plan.rate, args, kwargs)
        held.limits += (name,)
        if not _reservation_taken(plan, name, asked):
            _admit_rate(
                plan.limiter("rate", name),
                name,
                plan.rate.on_redis_down,
                deadline,
                asked.reserve_max_ms,
            )
    if plan.concurrency is not None:
        name = plan.name_for(plan.concurrency, args, kwargs)
        held.limits += (name,)
        slots = plan.limiter("slots", name)
        from xsm_celery.redis.concurrency import RENEWER, new_holder

        holder = new_holder()
        got: list[Any] = []

        def acquire() -> Any:
            decision, lease = slots.try_acquire(holder)
            if lease is not None:
                got.append(lease)
            return decision

        _until_admitted(acquire, "no_slot", name, plan.concurrency.on_redis_down, deadline)
        if got:
            held.lease = got[0]
            RENEWER.hold(got[0])


def _admit_rate(limiter: Any, name: str, down: str, deadline: float, reserve_max_ms: float) -> None:
    """Take a token, or reserve the next one and wait for it here or in a deferral."""
    if getattr(limiter, "burst", None) is None:  # a sliding window cannot reserve
        _until_admitted(limiter.try_acquire, "rate_limited", name, down, deadline)
        return
    try:
        decision = limiter.try_acquire(reserve_max_ms=reserve_max_ms)
    except StoreUnavailableError as exc:
        _redis_down(down, "rate_limited", name, exc)
        return
    if decision.admitted:
        return
    if decision.reserved and time.monotonic() + decision.wait_ms / 1000.0 <= deadline:
        time.sleep(decision.wait_ms / 1000.0)
        return
    raise _Defer("rate_limited", name, decision.wait_ms, reserved=decision.reserved)


def _reservation_taken(plan: FleetPlan, name: str, asked: _Asked) -> bool:
    """Whether Redis held a token reserved for this task on ``name`` (now consumed).

    The header only says where to look: a claim Redis does not back is counted, logged
    once and ignored, and the task asks for a token like any other.
    """
    if asked.claim is None:
        return False
    if asked.claim != name:
        ignored(RESERVATION_HEADER, "names another limit", plan.task_name)
        return False
    try:
        taken = bool(asked.task_id) and plan.records().take(name, asked.task_id)
    except StoreUnavailableError:
        return False  # the token request that follows applies on_redis_down
    if not taken:
        ignored(RESERVATION_HEADER, "no reservation in Redis", plan.task_name)
    return taken


def _admit_breaker(plan: FleetPlan, held: _Held) -> None:
    name = plan.breaker_name
    assert name is not None
    try:
        breaker = plan.breaker()
        held.breaker_pass = breaker.admit()
        held.breaker = breaker
    except CircuitOpenError as exc:
        raise _Defer("breaker_open", name, exc.retry_after_ms or 1_000.0) from None
    except StoreUnavailableError as exc:
        _redis_down(plan.breaker_down, "breaker", name, exc)


def _until_admitted(
    attempt: Callable[[], Any], reason: str, name: str, down: str, deadline: float
) -> None:
    """Ask until admitted, waiting in place only while the answer is due before ``deadline``."""
    for _ in range(64):
        try:
            decision = attempt()
        except StoreUnavailableError as exc:
            _redis_down(down, reason, name, exc)
            return
        if decision.admitted:
            return
        wake = time.monotonic() + decision.wait_ms / 1000.0
        if wake > deadline:
            raise _Defer(reason, name, decision.wait_ms)
        time.sleep(max(0.001, decision.wait_ms / 1000.0))
    raise _Defer(reason, name, 0.0)


def _redis_down(choice: str, kind: str, name: str, exc: BaseException) -> None:
    FLEET_COUNTERS[(f"redis_down_{choice}", kind)] += 1
    emit(FactKind.BACKEND_UNAVAILABLE, backend="redis", option=kind, choice=choice)
    if choice == "closed":
        raise _Defer("redis_down", name, 1_000.0 + random.random() * 1_000.0)
    now = time.monotonic()
    with _warn_lock:
        last = _warned.get(f"{kind}:{name}", -1e9)
        if now - last >= 10.0:
            _warned[f"{kind}:{name}"] = now
            logger.warning(
                "fleet %s %r: Redis is unreachable (%s); running the task without it "
                "(on_redis_down='open'); %d runs so far in this process",
                kind,
                name,
                exc,
                FLEET_COUNTERS[(f"redis_down_{choice}", kind)],
            )


def _release(plan: FleetPlan, held: _Held, *, failed: bool, outcome: str) -> None:
    if held.breaker is not None:
        _report(plan, held.breaker, held.breaker_pass, outcome)
        held.breaker = None
    lease = held.lease
    if lease is not None:
        from xsm_celery.redis.concurrency import RENEWER

        RENEWER.drop(lease)
        held_ms = time.monotonic() * 1000.0 - held.started_ms if held.started_ms else 0.0
        try:
            lease.slots.release(lease.holder, held_ms, failed)
        except StoreUnavailableError as exc:
            logger.warning(
                "could not release fleet slot %s (%s); its lease frees it within %.0f s",
                lease.slots.key.name,
                exc,
                lease.slots.lease_ms / 1000,
            )
        held.lease = None


def _deferral(
    task: Any,
    plan: FleetPlan,
    *,
    bound: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    defer: _Defer,
) -> BaseException:
    """Re-publish the message with its countdown (or dead-letter it); return what to raise."""
    request = task.request
    headers = dict(request.headers or {})
    task_id = str(request.id or "")
    first, count, now, counted = _note_deferral(plan, task_id, headers)
    if counted and now - first > plan.settings.max_deferral_s:
        return _dead_letter(
            task,
            plan,
            bound=bound,
            args=args,
            kwargs=kwargs,
            defer=defer,
            waited_s=now - first,
            count=count,
        )
    countdown = min(jittered_countdown(defer.wait_ms), bound.settings.timer_countdown_max_s)
    headers[DEFERRAL_HEADER] = json.dumps({"first": first, "count": count, "reason": defer.reason})
    headers.pop(RESERVATION_HEADER, None)
    if defer.reserved and _hold_reservation(plan, defer, task_id):
        headers[RESERVATION_HEADER] = defer.limit
        countdown = max(countdown, defer.wait_ms / 1000.0)  # never before its own token
    signature = task.signature_from_request(
        request, list(args), kwargs, countdown=countdown, headers=headers, retries=request.retries
    )
    signature.apply_async()
    FLEET_COUNTERS[("deferred", defer.reason)] += 1
    emit(FactKind.LIMIT_DEFERRED, limit=defer.limit, task=plan.task_name, reason=defer.reason)
    if not getattr(task, "ignore_result", False) and request.id:
        try:
            task.update_state(
                task_id=request.id,
                state=DEFERRED_STATE,
                meta={
                    "reason": defer.reason,
                    "limit": defer.limit,
                    "countdown": countdown,
                    "deferrals": count,
                },
            )
        except Exception:  # a result backend outage must not lose the deferral
            logger.debug("could not store the DEFERRED state of %s", request.id, exc_info=True)
    task_deferred.send(
        sender=task, request=request, reason=defer.reason, limit=defer.limit, countdown=countdown
    )
    logger.info(
        "deferred %s[%s] by %.2f s: %s on %r (deferral %d)",
        task.name,
        request.id,
        countdown,
        defer.reason,
        defer.limit,
        count,
    )
    return Ignore()


def _note_deferral(
    plan: FleetPlan, task_id: str, headers: dict[str, Any]
) -> tuple[float, int, float, bool]:
    """(first deferral, deferrals, now, counted) of this task, from Redis when it answers.

    While Redis cannot be reached the header's history (if it is in range) is carried on,
    but not counted: a header alone never dead-letters a task, and an outage is waited out.
    """
    if task_id:
        try:
            first, count, now = plan.records().note_deferral(task_id, plan.settings.max_deferral_s)
            return first, count, now, True
        except StoreUnavailableError:
            pass
    now = time.time()
    claimed = deferral_history(headers, plan.task_name, now)
    if claimed is None:
        return now, 1, now, False
    return claimed.first, claimed.count + 1, now, False


def _hold_reservation(plan: FleetPlan, defer: _Defer, task_id: str) -> bool:
    """Record in Redis the token the limiter reserved for this task; False if it cannot.

    Without the record the deferred message asks for a token again when it comes back, so
    the reserved one goes unused: the limit is never exceeded, only briefly under-used.
    """
    if not task_id:
        return False
    try:
        plan.records().reserve(defer.limit, task_id, defer.wait_ms)
    except StoreUnavailableError:
        return False
    return True


def _dead_letter(
    task: Any,
    plan: FleetPlan,
    *,
    bound: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    defer: _Defer,
    waited_s: float,
    count: int,
) -> BaseException:
    error = DeferredTooLongError(
        f"task {task.name}[{task.request.id}] was deferred {count} times over {waited_s:.0f} s "
        f"({defer.reason} on {defer.limit!r}), past xsm_fleet_max_deferral_s="
        f"{plan.settings.max_deferral_s:g}; raise the limit or the bound, then replay it",
        reason=defer.reason,
        limit=defer.limit,
        deferrals=count,
    )
    snapshot = _verified_snapshot(bound, task.request)
    machine = bound.machine
    bound.writer.write(
        TaskFailure.of_task(
            task,
            machine,
            args,
            kwargs,
            state_id="deferred",
            event_type="xsm.fleet.deferred",
            snapshot=snapshot,
            error=error,
            retryable=True,
        )
    )
    _forget_deferrals(plan, str(task.request.id or ""))
    FLEET_COUNTERS[("dead_lettered", defer.reason)] += 1
    emit(
        FactKind.LIMIT_DEFERRED, limit=defer.limit, task=plan.task_name, reason="deferred_too_long"
    )
    return error


def _verified_snapshot(bound: Any, request: Any) -> dict[str, Any]:
    """The chart snapshot of this task's header if it passes every check, else empty.

    A dead letter must not carry an error chain that was not written for this task.
    """
    snapshot: dict[str, Any] = bound.codec.verified_snapshot(request.headers, str(request.id or ""))
    return snapshot
