"""One attempt of a chart task: run it, directly or through the chart, and say where it settled.

The chart decides; this module carries one attempt out and returns the decision as a value
(:class:`Settled`) for ``execute`` to act on. :func:`run_chart` is the one place that decides
how a run goes:

* Directly, when the task was bound with a :class:`DirectAttempt` and nothing is known about
  this attempt yet: a run whose success is known to end the chart at once (the shipped
  chart's first run, or a retry whose header has the very shape the chart itself wrote for
  that attempt) calls the function before any interpreter exists. A return or a Celery
  control exception settles the run; a failure becomes ``run.lost``, and the chart starts
  (or resumes) with it as its invocation's outcome, as for a lost attempt, so it decides the
  retry as always.
* Through the chart: the run restores the snapshot the message carried (or starts a fresh
  chart), fires the pending retry timer so the chart enters ``attempting`` and invokes the
  ``work`` service (the user's function), and then reads where the chart settled:

  * a final state that is not tagged ``dead-letter``: success, the function's return value;
  * a dead-letter state: give up now, with the last error;
  * a state with a pending ``after`` timer: retry after exactly that timer's delay, unless the
    timer's transition would land in a dead-letter state, in which case the timer is fired at
    once so that giving up happens in the same run as the last failure.

The engine comes back to the run only through the logic bound once per task,
:func:`work_service` and :func:`recording_delay`, and they find the run on the context object
the engine hands them (:class:`RunContext`): the run is passed down, never looked up.

Time is a ``SimulatedClock`` that only this module moves, so the delay is whatever the chart's
named delay computed, carried to Celery in milliseconds without rounding. Where a timer leads
and how a chart restarts are asked of the engine (:mod:`xsm_celery.engine.queries`), so guards
are evaluated, logged and reported exactly as when the timer fires.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.task.header import MAX_ERRORS, ChartHeader
from xsm_celery.engine import Machine, SimulatedClock, SyncInterpreter
from xsm_celery.engine.queries import fresh_interpreter, next_timer, timer_entries
from xsm_celery.engine.state import DONE
from xsm_celery.errors import ConfigurationError, SnapshotError
from xsm_celery.patterns import ERRORS_CONTEXT_KEY
from xsm_celery.patterns.error_chain import error_entry

if TYPE_CHECKING:
    from xsm_celery.engine.timers import Timer

__all__ = [
    "DEAD_LETTER_TAG",
    "MIN_TIMER_MS",
    "DirectAttempt",
    "Run",
    "RunContext",
    "Settled",
    "Verdict",
    "recording_delay",
    "run_chart",
    "snapshot_shape",
    "spent_attempts",
    "work_service",
]

logger = logging.getLogger(__name__)

#: The tag that marks a state where the task gives up.
DEAD_LETTER_TAG = "dead-letter"

#: Shortest delay given to the engine's timer, in ms (see :func:`recording_delay`).
MIN_TIMER_MS = 0.001

#: Reports a header that passed its checks but does not restore: ``(reason, detail)``.
Reject = Callable[[str, str], None]


@dataclass(slots=True)
class Run:
    """What one Celery run hands its attempt, and what it learns back."""

    #: The user's function, called as ``call(*args, **kwargs)``.
    call: Callable[..., Any]
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Records "attempt n started" before the function runs (None: an eager run).
    mark: Callable[[int], None] | None = None
    #: The error the chart's first invocation reports instead of running: a lost attempt,
    #: or the failure of a direct attempt (see :class:`DirectAttempt`).
    lost: BaseException | None = None
    result: Any = None
    error: BaseException | None = None
    #: A Celery control-flow exception (Ignore, Reject, Retry) to re-raise untouched.
    control: BaseException | None = None
    #: The delay the chart's last named delay computed, in ms.
    delay_ms: float | None = None
    invocations: int = 0


class RunContext(dict[str, Any]):
    """The chart's context during one run, with the run beside it for the engine's callbacks.

    The engine hands the live context to every service and named delay; this is how the
    ``work`` service and :func:`recording_delay` reach the run the interpreter carries out.
    The run is an attribute, not a key, so guards, actions and the snapshot see only the
    chart's own context.
    """

    __slots__ = ("run",)

    def __init__(self, context: Mapping[str, Any], run: Run) -> None:
        super().__init__(context)
        self.run = run


class Verdict(enum.Enum):
    """What the run does with the task, read from where the chart settled."""

    #: A final state that is not a dead letter: return the function's result.
    DONE = "done"
    #: Waiting on a timer that leads back to an attempt: retry after its delay.
    RETRY = "retry"
    #: A dead-letter state: write the dead letter and fail.
    GIVE_UP = "give_up"
    #: The function raised one of Celery's control-flow exceptions: re-raise it.
    CONTROL = "control"


@dataclass(slots=True)
class Settled:
    """Where one run settled, and what ``execute`` does about it (its ``verdict``).

    Not frozen: it is built once per run, and a frozen dataclass pays a call per field.
    """

    verdict: Verdict
    run: Run
    #: None when a direct attempt settled the run before any chart was started.
    interpreter: SyncInterpreter | None
    delay_ms: float | None = None
    state_id: str | None = None


def run_chart(
    machine: Machine,
    header: ChartHeader | None,
    run: Run,
    reject: Reject | None = None,
    *,
    first: DirectAttempt | None = None,
) -> Settled:
    """Carry out one attempt for ``run`` and say where the chart settled.

    This is where a run is sent direct or through the chart (see the module docstring):
    with ``first`` and no lost attempt to record, a header ``first`` knows goes direct.

    Args:
        machine: The task's chart.
        header: The checked ``xsm_chart`` header of the message (None: a first run).
        run: What the attempt runs and records.
        reject: Told when the header cannot be restored; the chart then starts afresh.
        first: The attempts that may run before the chart; None to always run the chart.
    """
    if first is not None and run.lost is None:
        number = first.number_for(header)
        if number is not None and first(run, number):
            verdict = Verdict.DONE if run.control is None else Verdict.CONTROL
            return Settled(verdict, run, None)
    clock = SimulatedClock(start_ms=0.0)
    interp = None if header is None else _resume(machine, header, clock, reject, run)
    if interp is None:
        interp = _carrying(SyncInterpreter(machine, clock=clock), run).start()
    return _classify(machine, interp, clock, run)


def _carrying(interp: SyncInterpreter, run: Run) -> SyncInterpreter:
    """``interp``, not started yet, its context now a :class:`RunContext` of ``run``."""
    interp.context = RunContext(interp.context, run)
    return interp


def _resume(
    machine: Machine,
    header: ChartHeader,
    clock: SimulatedClock,
    reject: Reject | None,
    run: Run,
) -> SyncInterpreter | None:
    """The chart where the header left it, its pending retry timer fired; None to start afresh.

    A deploy may change the chart while retries are in flight. Their snapshots no longer fit,
    so the chart starts again from its initial state with the old context (attempt counter,
    error chain): the task keeps its history and its budget instead of failing on restore.
    """
    if not header.same_structure:
        logger.warning(
            "chart %r changed since the snapshot in the message was taken; starting the chart "
            "again with the same context",
            machine.id,
        )
        context = header.snapshot["context"]
        return _carrying(fresh_interpreter(SyncInterpreter, machine, context, clock), run).start()
    try:
        interp = SyncInterpreter.from_snapshot(header.snapshot, machine, clock=clock)
    except SnapshotError as exc:
        if reject is not None:
            reject("does not restore", str(exc)[:120])
        return None
    timer = next_timer(interp)
    if timer is None:
        if reject is not None:
            reject("not waiting on a timer", str(sorted(interp.current_state_ids))[:120])
        return None
    if _gives_up_unrun(interp, timer):
        if reject is not None:
            reject("gives up without running", str(sorted(interp.current_state_ids))[:120])
        return None
    _carrying(interp, run)
    clock.advance_to(timer.due)
    return interp


def _gives_up_unrun(interp: SyncInterpreter, timer: Timer) -> bool:
    """Whether firing ``timer`` would enter a dead-letter state before ``work`` runs again.

    No run writes such a header: when a failure's timer leads to a dead letter, ``_classify``
    fires it in that same run. So only a forged or stale header waits on one, and restoring
    it would end the task without running it; whatever the chart's guards read.
    """
    return any(DEAD_LETTER_TAG in node.tags for node in timer_entries(interp, timer))


def _classify(
    machine: Machine, interp: SyncInterpreter, clock: SimulatedClock, run: Run
) -> Settled:
    if run.control is not None:
        return Settled(Verdict.CONTROL, run, interp)
    dead = _dead_letter_state(interp)
    if dead is not None:
        return Settled(Verdict.GIVE_UP, run, interp, state_id=dead)
    if interp.status == DONE:
        return Settled(Verdict.DONE, run, interp)
    timer = next_timer(interp)
    if timer is None or run.delay_ms is None:
        raise ConfigurationError(
            f"retry chart {machine.id!r} settled in {sorted(interp.current_state_ids)} with no "
            "final state and no pending 'after' timer; every path of a task chart must end in "
            "a final state, a 'dead-letter' state, or wait on a named delay"
        )
    if any(DEAD_LETTER_TAG in node.tags for node in timer_entries(interp, timer)):
        # Giving up happens in the same run as the last failure, not one countdown later.
        clock.advance_to(timer.due)
        return _classify(machine, interp, clock, run)
    return Settled(Verdict.RETRY, run, interp, delay_ms=run.delay_ms)


def _dead_letter_state(interp: SyncInterpreter) -> str | None:
    if not interp.has_tag(DEAD_LETTER_TAG):
        return None
    for state_id in sorted(interp.current_state_ids):
        node = interp.machine.get_state(state_id)
        if DEAD_LETTER_TAG in node.tags:
            return str(node.id)
    return str(sorted(interp.current_state_ids)[0])


@dataclass(frozen=True)
class DirectAttempt:
    """The attempts a success is known to end at once, run before any interpreter exists.

    Built when the task is bound by ``machine.first_attempt``, which asked the engine that
    each of them ends ``DONE`` after one invocation.
    """

    task_name: str
    #: Celery's control-flow exceptions: they settle a run as they are, uncounted.
    control: tuple[type[BaseException], ...]
    #: The attempt number a first run (no header) makes.
    first: int
    #: Spent attempts -> the snapshot shape the chart writes then, checked by the engine.
    retry_shapes: Mapping[int, Hashable] = field(default_factory=dict)

    def number_for(self, header: ChartHeader | None) -> int | None:
        """The attempt to run directly for ``header``, or None when the chart must run it."""
        if header is None:
            return self.first
        if not header.same_structure:
            return None
        shape = self.retry_shapes.get(header.attempt)
        if shape is None or shape != snapshot_shape(header.snapshot):
            return None
        return header.attempt + 1

    def __call__(self, run: Run, number: int) -> bool:
        """Run attempt ``number``; True if that settled the run, False with ``run.lost`` set."""
        if run.mark is not None:
            _mark_attempt(run.mark, number, self.task_name)
        try:
            run.result = run.call(*run.args, **run.kwargs)
        except self.control as exc:
            run.control = exc
        except Exception as exc:
            run.lost = exc
            return False
        run.invocations = 1
        return True


def snapshot_shape(snapshot: Mapping[str, Any]) -> Hashable:
    """What a snapshot's run depends on besides its context: where it is, what it waits for."""
    try:
        deadlines = tuple(
            (d["state_id"], d["key"], d["event_type"]) for d in snapshot.get("deadlines") or ()
        )
        return (
            snapshot.get("status"),
            json.dumps(snapshot.get("value"), sort_keys=True),
            tuple(snapshot.get("state_ids") or ()),
            deadlines,
            bool(snapshot.get("delayed")),
            bool(snapshot.get("children")),
            bool(snapshot.get("history")),
        )
    except (KeyError, TypeError):
        return None


def work_service(
    task_name: str,
    control: tuple[type[BaseException], ...],
    redact_keys: tuple[str, ...] | None,
) -> Callable[[Any, RunContext, Any], Any]:
    """The ``work`` service: one attempt of the task's function, or the report of a lost one.

    Bound into the task's machine once; the engine calls it with the live context, whose
    run (see :class:`RunContext`) says what to call and takes the outcome back.
    """

    def work(interp: Any, ctx: RunContext, event: Any) -> Any:
        run = ctx.run
        run.invocations += 1
        lost, run.lost = run.lost, None
        if lost is not None:
            _push(ctx, task_name, lost, redact_keys)
            run.error = lost
            raise lost
        if run.mark is not None:
            _mark_attempt(run.mark, spent_attempts(ctx) + 1, task_name)
        try:
            result = run.call(*run.args, **run.kwargs)
        except control as exc:
            run.control = exc
            return None
        except Exception as exc:
            _push(ctx, task_name, exc, redact_keys)
            run.error = exc
            raise
        run.result, run.error = result, None
        return result

    return work


def recording_delay(delay: Any) -> Callable[[Mapping[str, Any], Any], float]:
    """Wrap a named delay so the run learns the exact milliseconds the chart asked for.

    The engine gets at least ``MIN_TIMER_MS``: a zero delay would be due at the very instant
    the run fires the previous timer, and the run would go on to the next attempt itself
    instead of handing it to Celery. The countdown still uses the exact value. An
    interpreter of the task's machine started outside :func:`run_chart` has no run to tell.
    """

    def recorded(ctx: Mapping[str, Any], event: Any) -> float:
        ms = float(delay(ctx, event) if callable(delay) else delay)
        if isinstance(ctx, RunContext):
            ctx.run.delay_ms = ms
        return max(ms, MIN_TIMER_MS)

    return recorded


def spent_attempts(ctx: Mapping[str, Any]) -> int:
    """The attempts the context's counter says were spent (0 when it holds no count)."""
    value = ctx.get("attempt", 0)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _mark_attempt(mark: Callable[[int], None], attempt: int, task_name: str) -> None:
    """Write the attempt marker; if its store is down, run the attempt anyway.

    The marker only matters if this worker dies during the attempt; refusing to run the task
    because Redis or the database blinked would turn a rare risk into a certain failure.
    """
    try:
        mark(attempt)
    except Exception:
        logger.warning(
            "could not write the attempt marker of %s (attempt %d); a crash during this "
            "attempt will not be counted",
            task_name,
            attempt,
            exc_info=True,
        )


def _push(
    ctx: dict[str, Any], task_name: str, error: BaseException, keys: tuple[str, ...] | None
) -> None:
    entry = error_entry("service", task_name, error, context=ctx, redact_keys=keys)
    chain = ctx.get(ERRORS_CONTEXT_KEY)
    chain = list(chain) if isinstance(chain, list) else []
    chain.append(entry)
    ctx[ERRORS_CONTEXT_KEY] = chain[-MAX_ERRORS:]
