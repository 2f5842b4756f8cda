"""The breakers and limits a worker reports to a status, from the fact stream or the metric files.

A status (``xsm-celery status``, the admin status page) asks the running workers for the last
state of every breaker and the admission and deferral counts of every limit. The solo and
threads pools run tasks in the worker's own process, where ``board`` (subscribed at
``worker_init``) saw every fact. The prefork pool runs them in children, which report only
through the multiprocess metric files, so a worker that serves ``/metrics`` sums those instead.
"""

from __future__ import annotations

import threading
from typing import Any

from xsm_celery.errors import MissingExtraError
from xsm_celery.hooks import Fact, FactKind

__all__ = ["StateBoard", "board", "reported_states", "states_from_metric_files"]

#: ``xsm_breaker_state`` gauge values, as ``prometheus.py`` sets them.
_BREAKER_NAMES = {0: "closed", 1: "half_open", 2: "open"}


class StateBoard:
    """The breakers and limits this process saw, from the fact stream."""

    #: The kinds it reads: subscribe it to these only.
    KINDS = frozenset(
        {FactKind.BREAKER_TRANSITION, FactKind.LIMIT_ADMITTED, FactKind.LIMIT_DEFERRED}
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.breakers: dict[str, str] = {}
        self.limits: dict[str, dict[str, float]] = {}

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber."""
        f = fact.fields
        if fact.kind is FactKind.BREAKER_TRANSITION:
            name = str(f.get("breaker") or f.get("name") or "")
            with self._lock:
                self.breakers[name] = str(f.get("to_state") or f.get("state") or "")
        elif fact.kind in (FactKind.LIMIT_ADMITTED, FactKind.LIMIT_DEFERRED):
            name = str(f.get("limit") or f.get("limiter") or f.get("name") or "")
            key = "admitted" if fact.kind is FactKind.LIMIT_ADMITTED else "deferred"
            with self._lock:
                counts = self.limits.setdefault(name, {"admitted": 0.0, "deferred": 0.0})
                counts[key] += 1

    def rows(self) -> list[dict[str, Any]]:
        """The board as ``WorkerState``-shaped dicts."""
        with self._lock:
            return _rows(self.breakers, self.limits)


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


def states_from_metric_files(path: str) -> list[dict[str, Any]]:
    """The breaker and limit figures of every process writing metric files under ``path``."""
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    breakers: dict[str, str] = {}
    limits: dict[str, dict[str, float]] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "xsm_breaker_state":
                breakers[sample.labels["breaker"]] = _BREAKER_NAMES.get(int(sample.value), "?")
            elif sample.name in ("xsm_limit_admissions_total", "xsm_limit_deferrals_total"):
                key = "admitted" if "admissions" in sample.name else "deferred"
                counts = limits.setdefault(sample.labels["limit"], {"admitted": 0, "deferred": 0})
                counts[key] = sample.value
    return _rows(breakers, limits)


def _rows(breakers: dict[str, str], limits: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    rows = [
        {"kind": "breaker", "name": n, "state": s, "detail": {}}
        for n, s in sorted(breakers.items())
    ]
    for name, counts in sorted(limits.items()):
        state = "deferring" if counts["deferred"] else "admitting"
        rows.append({"kind": "limit", "name": name, "state": state, "detail": dict(counts)})
    return rows
