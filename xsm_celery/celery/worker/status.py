"""Where the status figures of a Celery app come from, and what its workers report.

``sources_for_app`` names the stores an app's settings point at (dead letters, durable
timers, the relay's outbox) and the fleet's Redis. Fleet breakers, rate limiters and slot
pools are read from that Redis when the figures are read (``fleet_states``, the same rows
``xsm-celery breakers`` lists), never from what a worker last saw. Process-local breakers
live inside the workers, so a status asks them: the ``xsm_states`` remote-control command (a
broadcast, as ``xsm-celery status`` sends it) answers with the state of every such breaker
and its age (``xsm_celery.metrics.states``). Under the prefork pool the children report
through the multiprocess metric files, so that needs ``xsm_metrics_port``; with the solo and
threads pools the worker's own process answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery.worker.control import inspect_command

from xsm_celery.metrics.states import reported_states

__all__ = ["fleet_states", "sources_for_app", "worker_states"]

#: Seconds a status waits for the workers' answers.
REPLY_TIMEOUT_S = 1.0


@inspect_command()
def xsm_states(state: Any) -> list[dict[str, Any]]:
    """Breakers and limits as this worker's processes last reported them."""
    return reported_states()


def worker_states(app: Any, timeout: float = REPLY_TIMEOUT_S) -> list[Any]:
    """Ask every running worker of ``app`` for its breakers and limits."""
    from xsm_celery.metrics.figures import WorkerState

    replies: dict[str, Any] = {}
    for reply in app.control.broadcast("xsm_states", reply=True, timeout=timeout) or []:
        replies.update(reply)
    states: list[WorkerState] = []
    for worker, rows in sorted(replies.items()):
        for row in _rows(rows):
            detail = dict(row.get("detail") or {})
            kind, name, now = str(row.get("kind")), str(row.get("name")), str(row.get("state"))
            states.append(WorkerState(worker, kind, name, now, detail))
    return states


def fleet_states(app: Any) -> Callable[[], list[Any]] | None:
    """A reader of ``app``'s fleet state in Redis as ``WorkerState`` rows; None without one.

    Each read lists the fleet and computes every row at that moment
    (``xsm_celery.celery.fleet.reading``).

    Raises:
        ConfigurationError: A fleet setting has the wrong type or range.
    """
    from xsm_celery.celery.fleet.reading import fleet_reader

    rows = fleet_reader(app)
    if rows is None:
        return None
    read_rows = rows

    def read() -> list[Any]:
        from xsm_celery.metrics.figures import FLEET_WORKER, WorkerState

        return [
            WorkerState(FLEET_WORKER, row.kind, row.name, row.state, _numbers(row.detail))
            for row in read_rows()
        ]

    return read


def _numbers(detail: Mapping[str, object]) -> dict[str, float]:
    return {k: float(v) for k, v in detail.items() if isinstance(v, int | float)}


def _rows(rows: Any) -> Iterable[dict[str, Any]]:
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def sources_for_app(app: Any, *, ask_workers: bool = False, create: bool = True) -> Any:
    """The ``Sources`` of ``app``: its dead-letter and timer stores, and the relay's outbox.

    Args:
        app: The Celery app whose settings name the stores.
        ask_workers: Also ask the running workers for their process-local breakers.
        create: Open stores as a worker does. With False (a status from the command line)
            a store whose SQLite file does not exist yet is left out instead of created.
    """
    from xsm_celery.celery.stores import stores_for
    from xsm_celery.celery.worker.relay import outbox_store
    from xsm_celery.metrics.figures import Sources

    stores = stores_for(app)
    settings = stores.settings

    def wanted(setting: Any) -> bool:
        return create or not _missing_sqlite_file(setting)

    return Sources(
        dead_letters=stores.dead_letters() if wanted(settings.dead_letter_store) else None,
        timers=stores.timers() if wanted(settings.timer_store) else None,
        outbox=outbox_store(app) if wanted(app.conf.get("xsm_outbox_store")) else None,
        workers=(lambda: worker_states(app)) if ask_workers else None,
        fleet=fleet_states(app),
    )


def _missing_sqlite_file(setting: Any) -> bool:
    """Whether ``setting`` is a ``sqlite:///path`` URL whose file does not exist."""
    if not isinstance(setting, str) or not setting.startswith("sqlite:///"):
        return False
    path = setting[len("sqlite:///") :].split("?", 1)[0]
    return bool(path) and not os.path.exists(path)
