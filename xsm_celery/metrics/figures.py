"""The figures read from the stores rather than counted: what is waiting, and for how long.

Counters say what happened; an operator also needs what is true now: how many outbox rows
wait and how old the oldest is, how many durable timers are stored and how late the
earliest due one is, how many dead letters arrived in the last hour and day by reason, how
many workflow instances sit in each state, and what state every fleet breaker and limiter is
in. ``read_figures`` asks the stores once; the Prometheus collector calls it on every scrape,
``xsm-celery status`` and the Django admin status page on every view, so the three show the
same truth. A store that is down costs its part of the report (recorded in ``errors``),
never the rest of it.

Breakers and limiters come from two places, both in ``Figures.workers``: the fleet's own
state in Redis, read now (rows whose ``worker`` is ``FLEET_WORKER``), and the process-local
breakers running workers report, each with its ``age_s``.

Standard library only: the stores are passed in.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "DEAD_LETTER_WINDOWS",
    "FLEET_WORKER",
    "MAX_INSTANCES_SCANNED",
    "Figures",
    "OutboxFigures",
    "Sources",
    "TimerFigures",
    "WorkerState",
    "read_figures",
]

logger = logging.getLogger(__name__)

#: The windows dead letters are counted over, by name, in seconds.
DEAD_LETTER_WINDOWS: tuple[tuple[str, float], ...] = (("1h", 3600.0), ("24h", 86_400.0))
#: Most workflow instances one report reads (the report says when it stopped early).
MAX_INSTANCES_SCANNED = 5000
#: The ``worker`` of a row read from the fleet's Redis rather than reported by a worker.
FLEET_WORKER = "fleet"


@dataclass(frozen=True)
class Sources:
    """The stores a report reads; any may be None (that part is left out)."""

    dead_letters: Any = None
    outbox: Any = None
    timers: Any = None
    #: A ``StateStore`` of persisted machines (workflow instances).
    instances: Any = None
    #: Process-local breaker states reported by running workers (see ``WorkerState``).
    workers: Callable[[], Iterable[WorkerState]] | None = None
    #: Fleet breakers, limiters and slot pools read from the fleet's Redis now, as
    #: ``WorkerState`` rows whose ``worker`` is ``FLEET_WORKER``.
    fleet: Callable[[], Iterable[WorkerState]] | None = None


@dataclass(frozen=True)
class OutboxFigures:
    """Outbox rows waiting for the relay, and rows set aside after repeated refusals."""

    pending: int
    oldest_age_s: float | None
    #: Rows the broker refused ``max_attempts`` times; they wait for an operator's requeue.
    failed: int = 0


@dataclass(frozen=True)
class TimerFigures:
    """Durable timers stored, and how late the earliest due one is."""

    pending: int
    lag_s: float
    earliest_due_at: float | None


@dataclass(frozen=True)
class WorkerState:
    """One breaker or limiter: as read from the fleet now, or as a worker last saw it.

    A worker's row has ``detail["age_s"]``, the seconds since the change it reports.
    """

    worker: str
    kind: str
    name: str
    state: str
    detail: dict[str, float] = field(default_factory=dict)


@dataclass
class Figures:
    """One reading of every source."""

    taken_at: float
    dead_letters: dict[str, dict[str, int]] | None = None
    outbox: OutboxFigures | None = None
    timers: TimerFigures | None = None
    #: ``(machine id, state, instances)`` rows, most instances first.
    instances: list[tuple[str, str, int]] | None = None
    instances_truncated: bool = False
    workers: list[WorkerState] | None = None
    #: The parts that could not be read, with the error.
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``--json`` prints it)."""
        out = asdict(self)
        if self.instances is not None:
            out["instances"] = [
                {"machine": m, "state": s, "count": n} for m, s, n in self.instances
            ]
        return out


def read_figures(sources: Sources, *, now: float | None = None) -> Figures:
    """Read every source of ``sources``; a failing one is noted in ``errors``."""
    now = time.time() if now is None else now
    figures = Figures(taken_at=now)
    parts: list[tuple[str, Any, Callable[[Any, float], Any]]] = [
        ("dead_letters", sources.dead_letters, _dead_letters),
        ("outbox", sources.outbox, _outbox),
        ("timers", sources.timers, _timers),
        ("instances", sources.instances, _instances),
        ("fleet", sources.fleet, lambda read, _now: list(read())),
        ("workers", sources.workers, lambda read, _now: list(read())),
    ]
    for name, source, read in parts:
        if source is None:
            continue
        try:
            value = read(source, now)
        except Exception as exc:
            logger.warning("xsm status: could not read %s: %s", name, exc)
            figures.errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        if name == "instances":
            figures.instances, figures.instances_truncated = value
        elif name in ("fleet", "workers"):
            figures.workers = [*(figures.workers or []), *value]
        else:
            setattr(figures, name, value)
    return figures


def _dead_letters(store: Any, now: float) -> dict[str, dict[str, int]]:
    counted = getattr(store, "count_by_reason", None)
    windows: dict[str, dict[str, int]] = {}
    for name, seconds in DEAD_LETTER_WINDOWS:
        since = now - seconds
        if callable(counted):
            windows[name] = dict(sorted(counted(since).items()))
        else:
            windows[name] = _count_records(store.all(), since)
    return windows


def _count_records(records: Iterable[Any], since: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        if record.taken_at >= since:
            counts[record.reason] = counts.get(record.reason, 0) + 1
    return dict(sorted(counts.items()))


def _outbox(store: Any, now: float) -> OutboxFigures:
    pending = int(store.count(pending_only=True))
    oldest = store.oldest_pending_at() if pending else None
    # A custom store without refusal counting has no failed rows to report.
    failed = int(store.count(failed_only=True)) if callable(getattr(store, "failed", None)) else 0
    return OutboxFigures(pending, None if oldest is None else max(0.0, now - oldest), failed)


def _timers(store: Any, now: float) -> TimerFigures:
    pending = int(store.count())
    earliest = store.earliest_due_at() if pending else None
    lag = max(0.0, now - earliest) if earliest is not None else 0.0
    return TimerFigures(pending, lag, earliest)


def _instances(store: Any, now: float) -> tuple[list[tuple[str, str, int]], bool]:
    keys = store.list_keys(limit=MAX_INSTANCES_SCANNED + 1)
    truncated = len(keys) > MAX_INSTANCES_SCANNED
    counts: dict[tuple[str, str], int] = {}
    for key in keys[:MAX_INSTANCES_SCANNED]:
        stored = store.load(key)
        if stored is None:
            continue
        machine, state = _state_of(stored.snapshot)
        counts[(machine, state)] = counts.get((machine, state), 0) + 1
    rows = [(m, s, n) for (m, s), n in counts.items()]
    rows.sort(key=lambda row: (-row[2], row[0], row[1]))
    return rows, truncated


def _state_of(snapshot: str) -> tuple[str, str]:
    """The machine id and the active leaf states of one stored snapshot."""
    try:
        data = json.loads(snapshot)
    except (TypeError, ValueError):
        return "unknown", "unreadable"
    if not isinstance(data, dict):
        return "unknown", "unreadable"
    machine = str(data.get("machine_id") or "unknown")
    ids = data.get("state_ids") or []
    prefix = f"{machine}."
    leaves = sorted(str(i)[len(prefix) :] if str(i).startswith(prefix) else str(i) for i in ids)
    if data.get("status") == "done":
        return machine, f"done:{','.join(leaves)}" if leaves else "done"
    return machine, ",".join(leaves) or str(data.get("status") or "unknown")
