"""``dlq replay``: send one dead letter back through the code that failed it.

A record says how it can be replayed. A Celery task record is re-enqueued through its app
(``xsm_celery.celery.replay_task``). An envelope record is re-dispatched to its machine
(``xsm_celery.eda.replay_dead_letter``). A record captured from a chart state has neither a
task nor an envelope to send again; it is refused with what to do instead. Both replay
functions are imported only here, when needed, so listing dead letters needs neither.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xsm_celery.cli.base import EXIT_REPLAY_FAILED, CliError
from xsm_celery.cli.target import DlqTarget
from xsm_celery.errors import XsmError
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["ENVELOPE_SUCCESS", "ReplayFailed", "ReplayOptions", "ReplayReport", "replay_record"]

#: Outcomes of a real envelope replay that count as success; any other one exits 1.
ENVELOPE_SUCCESS = frozenset({"processed", "duplicate"})


class ReplayFailed(CliError):
    """A real replay ran and failed (the broker refused the task): exit status 1."""

    exit_code = EXIT_REPLAY_FAILED


@dataclass(frozen=True)
class ReplayReport:
    """The replay function's result as plain data, and whether it counts as a success."""

    data: dict[str, Any]
    succeeded: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplayOptions:
    """What the operator asked for on the command line."""

    dry_run: bool
    reason: str
    force: bool
    actor: str | None
    store_url: str | None = None
    machines: Sequence[str] = ()
    logic: str | None = None


def replay_record(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> ReplayReport:
    """Replay ``record`` the way its kind allows.

    Raises:
        CliError: the record cannot be replayed, a needed piece is missing, or the replay
            function refused (``ReplayRefusedError`` and every other library error).
        ReplayFailed: a real task replay could not be sent.
    """
    try:
        if record.task_name:
            return _replay_task(target, record, options)
        if record.envelope is not None:
            return _replay_envelope(target, record, options)
    except XsmError as exc:
        raise CliError(str(exc)) from None
    raise CliError(
        f"dead letter {record.id} was captured from a chart state, not an envelope or a "
        "task; restore its snapshot instead (only task and envelope dead letters replay)"
    )


def _replay_task(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> ReplayReport:
    """A task replay either sends the task (success) or raises: refused, or not sent."""
    replay_task = _import("xsm_celery.celery", "replay_task", "replaying a Celery task")
    app = target.app(needed_for=f"replaying task {record.task_name}")
    store = target.store()
    kwargs: dict[str, Any] = {
        "reason": options.reason,
        "dry_run": options.dry_run,
        "actor": options.actor,
    }
    notes: tuple[str, ...] = ()
    if options.force:
        if "force" in inspect.signature(replay_task).parameters:
            kwargs["force"] = True
        else:
            notes = (
                "--force is ignored for task dead letters: a replayed task starts a "
                "fresh chart, so a changed chart never refuses it",
            )
    try:
        result = replay_task(store, record.id, app, **kwargs)
    except XsmError:
        raise
    except Exception as exc:  # the broker or the app failed to send: the replay ran, and failed
        raise ReplayFailed(
            f"replay of {record.id} failed: {type(exc).__name__}: {exc}; the "
            "record stays unresolved"
        ) from None
    return ReplayReport(result_dict(result), succeeded=True, warnings=notes)


def _replay_envelope(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> ReplayReport:
    replay_dead_letter = _import(
        "xsm_celery.eda", "replay_dead_letter", "replaying an envelope dead letter"
    )
    from xsm_celery.cli.dispatcher import build_dispatcher

    if not options.store_url or not options.machines:
        raise CliError(
            "replaying an envelope dead letter needs --store URL (the machines' "
            "state store) and --machine FILE (its chart; repeatable)"
        )
    dispatcher = build_dispatcher(
        options.store_url, options.machines, options.logic, machine_id=record.machine_id
    )
    result = replay_dead_letter(
        target.store(),
        record.id,
        dispatcher,
        reason=options.reason,
        dry_run=options.dry_run,
        force=options.force,
        actor=options.actor,
    )
    data = result_dict(result)
    return ReplayReport(data, succeeded=options.dry_run or data.get("outcome") in ENVELOPE_SUCCESS)


def _import(module: str, name: str, purpose: str) -> Any:
    """``module.name``, or a one-line error naming what is missing."""
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise CliError(f"{purpose} needs {module}, which cannot be imported: {exc}") from None
    if found is None:
        raise CliError(
            f"{purpose} needs {module}.{name}, which this installation lacks; upgrade xsm-celery"
        )
    return found


def result_dict(result: Any) -> dict[str, Any]:
    """A replay result (a dataclass, or any object with attributes) as plain data."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    if isinstance(result, dict):
        return dict(result)
    return {key: value for key, value in vars(result).items() if not key.startswith("_")}
