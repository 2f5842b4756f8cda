"""One Celery run of a chart task: restore the chart, take one attempting step, read the outcome.

The chart decides; this module only carries the decision out. A run restores the snapshot the
message carried (or starts a fresh chart), fires the pending retry timer so the chart enters
``attempting`` and invokes the ``work`` service (the user's function), and then reads where
the chart settled:

* a final state that is not tagged ``dead-letter``: success, the function's return value;
* a dead-letter state: give up now, with the last error;
* a state with a pending ``after`` timer: retry after exactly that timer's delay, unless the
  timer's transition would land in a dead-letter state, in which case the timer is fired at
  once so that giving up happens in the same run as the last failure.

A run of a chart whose success was shown, when the task was bound, to end the chart at once
(the shipped chart: its first run, and a retry whose header has the very shape the chart
itself wrote for that attempt) calls the function before any interpreter exists: when it
returns, the chart's verdict is already known, and when it fails, the chart starts (or
resumes) and is handed the error as its invocation's outcome (as for a lost attempt), so it
decides the retry as always.

Time is a ``SimulatedClock`` that only this module moves, so the delay is whatever the chart's
named delay computed, carried to Celery in milliseconds without rounding. Where a timer leads
and how a chart restarts are asked of the engine (:mod:`xsm_celery.engine.queries`), so guards
are evaluated, logged and reported exactly as when the timer fires.
"""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from xsm_celery.engine import Machine, SimulatedClock, SyncInterpreter
from xsm_celery.engine.queries import fresh_interpreter, next_timer, timer_entries
from xsm_celery.engine.state import DONE
from xsm_celery.errors import ConfigurationError, SnapshotError

if TYPE_CHECKING:
    from xsm_celery.celery.task.header import ChartHeader
    from xsm_celery.engine.timers import Timer

__all__ = [
    "DEAD_LETTER_TAG",
    "FirstAttempt",
    "Run",
    "Settled",
    "Verdict",
    "current_run",
    "run_chart",
]

logger = logging.getLogger(__name__)

#: The tag that marks a state where the task gives up.
DEAD_LETTER_TAG = "dead-letter"

#: Reports a header that passed its checks but does not restore: ``(reason, detail)``.
Reject = Callable[[str, str], None]


@dataclass
class Run:
    """What one Celery run passes to the ``work`` service and learns back from it."""

    #: Calls the user's function with the message's arguments.
    call: Callable[[], Any]
    #: Records "attempt n started" before the function runs (None: eager or direct runs).
    mark: Callable[[int], None] | None = None
    #: The error the first invocation reports instead of running: a lost attempt, or the
    #: error of a first attempt run before the chart (see :data:`FirstAttempt`).
    lost: BaseException | None = None
    result: Any = None
    error: BaseException | None = None
    #: A Celery control-flow exception (Ignore, Reject, Retry) to re-raise untouched.
    control: BaseException | None = None
    #: The delay the chart's last named delay computed, in ms.
    delay_ms: float | None = None
    invocations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class FirstAttempt(Protocol):
    """Runs an attempt before any interpreter exists, where a success is known to end the chart.

    ``number_for`` says which attempt a run would make if it may go first (None: the chart
    must run it); calling it returns True when that settled the run (the function returned,
    or raised a Celery control exception), False when it failed (``run.lost``).
    """

    @property
    def control(self) -> tuple[type[BaseException], ...]:
        """Celery's control-flow exceptions: they settle a run as they are, uncounted."""

    def number_for(self, header: ChartHeader | None) -> int | None:
        """The attempt number to run directly for this header, or None."""

    def attempt(
        self,
        mark: Callable[[int], None] | None,
        number: int,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> tuple[Any, Exception | None]:
        """Mark attempt ``number``, call ``fn``: (result, None) or (None, error); control raises."""

    def __call__(self, run: Run, number: int) -> bool:
        """Run attempt ``number`` of the function; True if that settled the run."""

_current: contextvars.ContextVar[Run] = contextvars.ContextVar("xsm_celery_run")


def current_run() -> Run:
    """The run in progress on this thread (the ``work`` service reads it)."""
    return _current.get()


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


@dataclass(frozen=True)
class Settled:
    """Where the chart settled after one run, and what the run does about it."""

    verdict: Verdict
    run: Run
    #: None when a first attempt settled the run before any chart was started.
    interpreter: SyncInterpreter | None
    delay_ms: float | None = None
    state_id: str | None = None


def run_chart(
    machine: Machine,
    header: ChartHeader | None,
    run: Run,
    reject: Reject | None = None,
    *,
    first: FirstAttempt | None = None,
) -> Settled:
    """Take one attempting step of ``machine`` for ``run`` and classify the result.

    Args:
        machine: The task's chart.
        header: The checked ``xsm_chart`` header of the message (None: a first run).
        run: What the ``work`` service runs and records.
        reject: Told when the header cannot be restored; the chart then starts afresh.
        first: Runs an attempt before the chart where a success is known to end it at once
            (see the module docstring); None to always run the chart.
    """
    number = None if first is None or run.lost is not None else first.number_for(header)
    if number is not None and first is not None and first(run, number):
        # Settled without the chart, so no ``work`` service looks up the current run.
        verdict = Verdict.DONE if run.control is None else Verdict.CONTROL
        return Settled(verdict, run, None)
    token = _current.set(run)
    try:
        clock = SimulatedClock(start_ms=0.0)
        interp = None if header is None else _resume(machine, header, clock, reject)
        if interp is None:
            interp = SyncInterpreter(machine, clock=clock).start()
        return _classify(machine, interp, clock, run)
    finally:
        _current.reset(token)


def _resume(
    machine: Machine, header: ChartHeader, clock: SimulatedClock, reject: Reject | None
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
        return fresh_interpreter(
            SyncInterpreter, machine, header.snapshot["context"], clock
        ).start()
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
