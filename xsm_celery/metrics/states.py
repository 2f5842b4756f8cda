"""The process-local breakers a worker reports to a status, from the fact stream or metric files.

A breaker built in a process (``CircuitBreaker``, ``scope="process"``) lives only there, so
a status (``xsm-celery status``, the admin status page) asks the running workers for it. A
fleet breaker or limiter is not on this board: its truth is the fleet's Redis, which the
status and the scrape read directly (``xsm_celery.celery.worker.status.fleet_states``), so a
worker never reports what it last happened to see of the fleet.

What a worker reports is a view from the past: each row carries ``age_s`` (since the last
change it saw) and a row not refreshed for ``LOCAL_STATE_TTL_S`` is dropped rather than shown
as if it were current. The solo and threads pools run tasks in the worker's own process,
where ``board`` (subscribed at ``worker_init``) saw every fact. The prefork pool runs them in
children, which report only through the multiprocess metric files, so a worker that serves
``/metrics`` reads those instead.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from xsm_celery.errors import MissingExtraError
from xsm_celery.hooks import Fact, FactKind

__all__ = [
    "BREAKER_STATES",
    "LOCAL_STATE_TTL_S",
    "StateBoard",
    "board",
    "reported_states",
    "states_from_metric_files",
]

#: The gauge value of each breaker state (higher is worse).
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
#: A worker-local row older than this (seconds since its last change) is no longer reported.
LOCAL_STATE_TTL_S = 900.0

_BREAKER_NAMES = {value: name for name, value in BREAKER_STATES.items()}


class StateBoard:
    """The process-local breakers this process saw, with when each last changed."""

    #: The kinds it reads: subscribe it to these only.
    KINDS = frozenset({FactKind.BREAKER_TRANSITION})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: name -> (state, epoch seconds of the change).
        self.breakers: dict[str, tuple[str, float]] = {}

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber (fleet-scope transitions are left out)."""
        f = fact.fields
        if fact.kind is not FactKind.BREAKER_TRANSITION or f.get("scope") == "fleet":
            return
        name = str(f.get("breaker") or f.get("name") or "")
        state = str(f.get("to_state") or f.get("state") or "")
        if name and state in BREAKER_STATES:
            with self._lock:
                self.breakers[name] = (state, time.time())

    def rows(self, now: float | None = None) -> list[dict[str, Any]]:
        """The board as ``WorkerState``-shaped dicts, stale rows left out."""
        with self._lock:
            return _rows(dict(self.breakers), time.time() if now is None else now)


#: The board of this process; the worker subscribes it at ``worker_init``.
board = StateBoard()


def reported_states() -> list[dict[str, Any]]:
    """What this worker answers a status with: its pool's metric files, else its board."""
    path = _multiprocess_dir()
    return board.rows() if path is None else states_from_metric_files(path)


def _multiprocess_dir() -> str | None:
    try:
        from xsm_celery.metrics.server import multiprocess_dir
    except MissingExtraError:  # without prometheus_client no process wrote metric files
        return None
    return multiprocess_dir()


def states_from_metric_files(path: str, now: float | None = None) -> list[dict[str, Any]]:
    """The process-local breakers of every live process writing metric files under ``path``.

    ``xsm_process_breaker_state`` is the worst state over the live processes and
    ``xsm_process_breaker_changed_at_seconds`` the latest change among them.
    """
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    states: dict[str, str] = {}
    changed: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            name = sample.labels.get("breaker")
            if name is None:
                continue
            if sample.name == "xsm_process_breaker_state":
                states[name] = _BREAKER_NAMES.get(int(sample.value), "?")
            elif sample.name == "xsm_process_breaker_changed_at_seconds":
                changed[name] = sample.value
    breakers = {n: (s, changed.get(n, 0.0)) for n, s in states.items()}
    return _rows(breakers, time.time() if now is None else now)


def _rows(breakers: dict[str, tuple[str, float]], now: float) -> list[dict[str, Any]]:
    rows = []
    for name, (state, changed_at) in sorted(breakers.items()):
        age = max(0.0, now - changed_at)
        if age <= LOCAL_STATE_TTL_S:
            rows.append({"kind": "breaker", "name": name, "state": state, "detail": {"age_s": age}})
    return rows
