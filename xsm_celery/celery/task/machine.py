"""Bind a task's retry chart to its logic, once, when the task is bound to its app.

The logic is the policy's named retry logic (``retryDelay``, ``retryCanRetry``,
``retryGiveUp``, ``retryBump``, ``retryReset``), the ``work`` service that runs the user's
function, and whatever ``chart_logic`` the task adds for a custom chart. Every named delay is
wrapped so the run learns the exact milliseconds the chart asked for.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.task.attempt import (
    DEAD_LETTER_TAG,
    Run,
    Verdict,
    current_run,
    run_chart,
)
from xsm_celery.celery.task.charts import ChartSpec, load_task_chart
from xsm_celery.engine import Machine, MachineLogic, create_machine
from xsm_celery.errors import ConfigurationError, WorkerLost, XsmError
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy
from xsm_celery.patterns.error_chain import error_entry

__all__ = [
    "MAX_DIRECT_RETRIES",
    "MAX_ERRORS",
    "MIN_TIMER_MS",
    "WORK_SERVICE",
    "DirectAttempt",
    "build_task_machine",
    "first_attempt",
]

if TYPE_CHECKING:
    from xsm_celery.celery.task.header import ChartHeader

logger = logging.getLogger(__name__)

#: The service name a task chart invokes to run the task's function.
WORK_SERVICE = "work"

#: Shortest delay given to the engine's timer, in ms (see ``_recording``).
MIN_TIMER_MS = 0.001

#: Error-chain entries kept in the snapshot (the newest win), as DeadLetterPlugin keeps.
MAX_ERRORS = 20


def build_task_machine(
    task_name: str,
    chart: ChartSpec,
    policy: RetryPolicy,
    *,
    control: tuple[type[BaseException], ...],
    chart_logic: MachineLogic | None = None,
    redact_keys: tuple[str, ...] | None = None,
) -> Machine:
    """Create the task's machine (validated here, never per run).

    Args:
        task_name: For error messages and the error chain's ``name``.
        chart: ``retry_chart=``: a dict, a path or a shipped chart name (default chart if None).
        policy: The task's ``RetryPolicy`` (``give_up_on`` / ``retry_on`` already applied).
        control: Celery's control-flow exceptions, passed through instead of counted.
        chart_logic: Extra named logic a custom chart uses.
        redact_keys: Keys whose values are masked in error messages.

    Raises:
        ConfigurationError: the chart is invalid, never invokes ``work``, or has no
            ``dead-letter`` state.
    """
    config = load_task_chart(chart)
    logic = policy.logic()
    if chart_logic is not None:
        logic = logic.merge(chart_logic)
    work = _work_service(task_name, control, redact_keys)
    logic = MachineLogic(
        actions=logic.actions,
        guards=logic.guards,
        services={**logic.services, WORK_SERVICE: work},
        delays={name: _recording(delay) for name, delay in logic.delays.items()},
    )
    try:
        machine = create_machine(config, logic=logic)
        machine.require_complete()
    except XsmError as exc:
        raise ConfigurationError(f"task {task_name!r}: retry chart refused: {exc}") from exc
    _check_shape(task_name, machine)
    return machine


def _check_shape(task_name: str, machine: Machine) -> None:
    if not any(inv.src == WORK_SERVICE for inv in machine.invokes):
        raise ConfigurationError(
            f"task {task_name!r}: retry chart {machine.id!r} never invokes {WORK_SERVICE!r}; "
            f'the state that runs the task needs "invoke": {{"src": "{WORK_SERVICE}"}}'
        )
    if not any(DEAD_LETTER_TAG in node.tags for node in machine.iter_states()):
        raise ConfigurationError(
            f"task {task_name!r}: retry chart {machine.id!r} has no state tagged "
            f"{DEAD_LETTER_TAG!r}, so the task could never give up; tag the terminal failure "
            f'state with "tags": ["{DEAD_LETTER_TAG}"]'
        )


def _recording(delay: Any) -> Callable[[Mapping[str, Any], Any], float]:
    """Wrap a named delay so the current run sees the exact value the chart used.

    The engine gets at least ``MIN_TIMER_MS``: a zero delay would be due at the very instant
    the run fires the previous timer, and the run would go on to the next attempt itself
    instead of handing it to Celery. The countdown still uses the exact value.
    """

    def recorded(ctx: Mapping[str, Any], event: Any) -> float:
        ms = float(delay(ctx, event) if callable(delay) else delay)
        current_run().delay_ms = ms
        return max(ms, MIN_TIMER_MS)

    return recorded


def _work_service(
    task_name: str,
    control: tuple[type[BaseException], ...],
    redact_keys: tuple[str, ...] | None,
) -> Callable[[Any, dict[str, Any], Any], Any]:
    """The ``work`` service: one attempt of the task's function (or a lost attempt)."""

    def work(interp: Any, ctx: dict[str, Any], event: Any) -> Any:
        run = current_run()
        run.invocations += 1
        lost, run.lost = run.lost, None
        if lost is not None:
            _push(ctx, task_name, lost, redact_keys)
            run.error = lost
            raise lost
        if run.mark is not None:
            _mark_attempt(run.mark, _attempt(ctx) + 1, task_name)
        try:
            result = run.call()
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


#: Retry attempts probed at bind time for the direct path (see ``first_attempt``); a retry
#: past this many failures runs the chart as usual.
MAX_DIRECT_RETRIES = 32


def first_attempt(
    task_name: str,
    machine: Machine,
    control: tuple[type[BaseException], ...],
    *,
    shipped: bool,
    attempt_key: str = "attempt",
    probe: Machine | None = None,
) -> DirectAttempt | None:
    """Attempts run before the chart, for a chart whose success ends it at once.

    Starting (or restoring) an interpreter is most of what a chart task's successful run
    costs, and on the shipped chart it decides nothing: ``attempting`` invokes ``work``, whose
    success leads to the final ``done``. Only the shipped chart with the policy's own logic
    qualifies (``shipped``): a custom chart or ``chart_logic`` may act on a success. The engine
    is still asked, when the task is bound: a first run whose function returns must end
    ``DONE`` after one invocation, and so must a retry from each snapshot the chart writes
    after 1, 2, ... failures. Those are asked of ``probe``, the same chart and policy with a
    fixed jitter source so that binding uses up none of the task's own (a lost worker stands
    in for the failure); without it only first runs go direct. A retry goes direct only when
    its header has that attempt's exact shape (state, timers, no children or history). A
    failure is handed to the chart (``run.lost``), which records it and decides the retry
    exactly as if ``work`` had run the function.
    """
    if not shipped:
        return None
    succeeds = Run(call=lambda: None)
    if run_chart(machine, None, succeeds).verdict is not Verdict.DONE or succeeds.invocations != 1:
        return None
    first = _attempt(machine.initial_context) + 1
    shapes = {} if probe is None else _retry_shapes(task_name, probe, attempt_key)
    return DirectAttempt(task_name, control, first, shapes)


@dataclass(frozen=True)
class DirectAttempt:
    """The attempts ``first_attempt`` showed a success ends at once (see there)."""

    task_name: str
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
        if shape is None or shape != _shape(header.snapshot):
            return None
        return header.attempt + 1

    def attempt(
        self,
        mark: Callable[[int], None] | None,
        number: int,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> tuple[Any, Exception | None]:
        """Mark attempt ``number`` and call ``fn``: (its result, None) or (None, its error).

        Celery's control-flow exceptions propagate as they are. The one home of a direct
        attempt: the run without a chart (``execute``) calls it with the message's arguments,
        ``__call__`` with a run's.
        """
        if mark is not None:
            _mark_attempt(mark, number, self.task_name)
        try:
            return fn(*args, **kwargs), None
        except self.control:
            raise
        except Exception as exc:
            return None, exc

    def __call__(self, run: Run, number: int) -> bool:
        """Run attempt ``number``; True if that settled the run, False with ``run.lost`` set."""
        mark, run.mark = run.mark, None
        try:
            result, failed = self.attempt(mark, number, run.call, (), {})
        except self.control as exc:
            run.control = exc
        else:
            if failed is not None:
                run.lost = failed
                return False
            run.result = result
        run.invocations = 1
        return True


def _retry_shapes(task_name: str, machine: Machine, attempt_key: str) -> dict[int, Hashable]:
    """Spent attempts -> snapshot shape, for each retry from which a success ends the chart."""
    from xsm_celery.celery.task.header import ChartHeader  # the header module imports this one

    shapes: dict[int, Hashable] = {}
    header: ChartHeader | None = None
    for _ in range(MAX_DIRECT_RETRIES):
        lost = WorkerLost(f"probe of {task_name}'s retry chart")
        settled = run_chart(machine, header, Run(call=lambda: None, lost=lost))
        if settled.verdict is not Verdict.RETRY or settled.interpreter is None:
            break
        written = settled.interpreter.get_snapshot()
        snapshot = json.loads(written)
        attempt = snapshot["context"].get(attempt_key)
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt in shapes:
            break
        # A restore takes the snapshot's dicts as they are: each run gets a fresh parse.
        retried = ChartHeader(snapshot=json.loads(written), attempt=attempt, same_structure=True)
        retry = Run(call=lambda: None)
        if run_chart(machine, retried, retry).verdict is Verdict.DONE and retry.invocations == 1:
            shapes[attempt] = _shape(snapshot)
        header = ChartHeader(snapshot=snapshot, attempt=attempt, same_structure=True)
    return shapes


def _shape(snapshot: Mapping[str, Any]) -> Hashable:
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


def _attempt(ctx: Mapping[str, Any]) -> int:
    value = ctx.get("attempt", 0)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _push(
    ctx: dict[str, Any], task_name: str, error: BaseException, keys: tuple[str, ...] | None
) -> None:
    entry = error_entry("service", task_name, error, context=ctx, redact_keys=keys)
    chain = ctx.get(ERRORS_CONTEXT_KEY)
    chain = list(chain) if isinstance(chain, list) else []
    chain.append(entry)
    ctx[ERRORS_CONTEXT_KEY] = chain[-MAX_ERRORS:]
