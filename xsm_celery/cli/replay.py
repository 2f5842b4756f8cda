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

from xsm_celery.cli.base import CliError
from xsm_celery.cli.target import DlqTarget
from xsm_celery.errors import XsmError
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["SUCCESS_OUTCOMES", "ReplayOptions", "replay_record", "result_dict"]

#: Outcomes of a real replay that count as success (exit 0); anything else exits 1.
SUCCESS_OUTCOMES = frozenset({"processed", "duplicate", "enqueued", "replayed"})


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


def replay_record(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> Any:
    """Replay ``record`` the way its kind allows and return the replay function's result.

    Raises:
        CliError: the record cannot be replayed, a needed piece is missing, or the replay
            function refused (``ReplayRefusedError`` and every other library error).
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


def _replay_task(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> Any:
    replay_task = _import("xsm_celery.celery", "replay_task", "replaying a Celery task")
    app = target.app(needed_for=f"replaying task {record.task_name}")
    kwargs: dict[str, Any] = {"reason": options.reason, "dry_run": options.dry_run,
                              "actor": options.actor}
    if options.force:
        if "force" not in inspect.signature(replay_task).parameters:
            raise CliError("--force has no effect on task dead letters (a replayed task "
                           "starts a fresh chart); leave it out")
        kwargs["force"] = True
    return replay_task(target.store(), record.id, app, **kwargs)


def _replay_envelope(target: DlqTarget, record: DeadLetter, options: ReplayOptions) -> Any:
    replay_dead_letter = _import("xsm_celery.eda", "replay_dead_letter",
                                 "replaying an envelope dead letter")
    from xsm_celery.cli.dispatcher import build_dispatcher

    if not options.store_url or not options.machines:
        raise CliError("replaying an envelope dead letter needs --store URL and --machine FILE")
    dispatcher = build_dispatcher(options.store_url, options.machines, options.logic)
    return replay_dead_letter(
        target.store(), record.id, dispatcher, reason=options.reason,
        dry_run=options.dry_run, force=options.force, actor=options.actor,
    )


def _import(module: str, name: str, purpose: str) -> Any:
    """``module.name``, or a one-line error naming what is missing."""
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise CliError(f"{purpose} needs {module}, which cannot be imported: {exc}") from None
    if found is None:
        raise CliError(f"{purpose} needs {module}.{name}, which this installation lacks; "
                       "upgrade xsm-celery")
    return found


def result_dict(result: Any) -> dict[str, Any]:
    """A replay result (a dataclass, or any object with attributes) as plain data."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    if isinstance(result, dict):
        return dict(result)
    return {key: value for key, value in vars(result).items() if not key.startswith("_")}
