"""Bind a task's retry chart to its logic, once, when the task is bound to its app.

The logic is the policy's named retry logic (``retryDelay``, ``retryCanRetry``,
``retryGiveUp``, ``retryBump``, ``retryReset``), the ``work`` service that runs the user's
function, and whatever ``chart_logic`` the task adds for a custom chart. Every named delay is
wrapped so the run learns the exact milliseconds the chart asked for. The service and the
wrapper are the run's own code (:mod:`~xsm_celery.celery.task.attempt`): this module only binds
them, and asks the engine, through the same ``run_chart`` a run uses, which attempts may go
before the chart.
"""

from __future__ import annotations

import json
from collections.abc import Hashable

from xsm_celery.celery.task.attempt import (
    DEAD_LETTER_TAG,
    DirectAttempt,
    Run,
    Verdict,
    recording_delay,
    run_chart,
    snapshot_shape,
    spent_attempts,
    work_service,
)
from xsm_celery.celery.task.charts import ChartSpec, load_task_chart
from xsm_celery.celery.task.header import ChartHeader
from xsm_celery.engine import Machine, MachineLogic, create_machine
from xsm_celery.errors import ConfigurationError, WorkerLost, XsmError
from xsm_celery.patterns import RetryPolicy

__all__ = [
    "MAX_DIRECT_RETRIES",
    "WORK_SERVICE",
    "build_task_machine",
    "first_attempt",
]

#: The service name a task chart invokes to run the task's function.
WORK_SERVICE = "work"


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
    work = work_service(task_name, control, redact_keys)
    logic = MachineLogic(
        actions=logic.actions,
        guards=logic.guards,
        services={**logic.services, WORK_SERVICE: work},
        delays={name: recording_delay(delay) for name, delay in logic.delays.items()},
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
    first = spent_attempts(machine.initial_context) + 1
    shapes = {} if probe is None else _retry_shapes(task_name, probe, attempt_key)
    return DirectAttempt(task_name, control, first, shapes)


def _retry_shapes(task_name: str, machine: Machine, attempt_key: str) -> dict[int, Hashable]:
    """Spent attempts -> snapshot shape, for each retry from which a success ends the chart."""
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
            shapes[attempt] = snapshot_shape(snapshot)
        header = ChartHeader(snapshot=snapshot, attempt=attempt, same_structure=True)
    return shapes
