"""Durable ``after`` timers: persisted instances whose timers are due are woken and saved.

A persisted instance has no process waiting on its timers: the snapshot records each
pending timer's wall-clock due time, and ``DueTimerScanner`` (run by Beat or a loop) loads
the instances that are due, lets the overdue timers fire, and saves them. Without a
``TimerStore`` it finds them by reading the snapshots; with one (and ``DurableTimers``
keeping its rows in step with every save) it reads an index and leases the rows, so
several scanners can run.

A wake whose save fails changes nothing: the next scan fires the same timer from the same
snapshot, so a counter bumped in that step is bumped once, not twice.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.engine import Machine, SimulatedClock
from xsm_celery.errors import ConfigurationError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.ids import new_id
from xsm_celery.persistence.persisted import persisted
from xsm_celery.persistence.protocols import (
    DEFAULT_CLAIM_LEASE_S,
    DueTimer,
    LockStrategy,
    StateStore,
    TimerStore,
)

__all__ = ["DueTimerScanner", "DurableTimers", "MemoryTimerStore", "ScanResult", "deadlines_of"]

logger = logging.getLogger("xsm_celery.persistence")


def deadlines_of(snapshot: str | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the pending timers a snapshot records (each has ``due_at_wall``)."""
    data = json.loads(snapshot) if isinstance(snapshot, str) else snapshot
    if not isinstance(data, Mapping) or data.get("status") != "running":
        return []
    found = data.get("deadlines") or []
    return [
        d for d in found if isinstance(d, dict) and isinstance(d.get("due_at_wall"), int | float)
    ]


class MemoryTimerStore:
    """Thread-safe in-memory ``TimerStore`` with leases, for tests and one process.

    Args:
        clock: Epoch-seconds clock for leases.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rows: dict[str, DueTimer] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def schedule(self, key: str, due_at_wall: float, payload: dict[str, Any]) -> str:
        """Store a timer for ``key`` and return its id."""
        timer = DueTimer(new_id(), key, float(due_at_wall), dict(payload))
        with self._lock:
            self._rows[timer.id] = timer
        return timer.id

    def count(self) -> int:
        """How many timers are stored, due or not."""
        return len(self)

    def earliest_due_at(self) -> float | None:
        """The due time of the earliest stored timer (epoch s), or None when there is none."""
        with self._lock:
            return min((t.due_at for t in self._rows.values()), default=None)

    def due(self, now: float, limit: int = 100) -> list[DueTimer]:
        """Return up to ``limit`` timers due at ``now``, earliest first."""
        with self._lock:
            rows = sorted((t for t in self._rows.values() if t.due_at <= now), key=_order)
        return rows[: max(limit, 0)]

    def claim(
        self, now: float, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[DueTimer]:
        """Lease up to ``limit`` due timers to ``owner``, skipping others' live leases."""
        until = self._clock() + lease_s
        taken: list[DueTimer] = []
        with self._lock:
            for timer in sorted((t for t in self._rows.values() if t.due_at <= now), key=_order):
                if len(taken) >= limit:
                    break
                holder = self._leases.get(timer.id)
                if holder and holder[0] != owner and holder[1] > self._clock():
                    continue
                self._leases[timer.id] = (owner, until)
                taken.append(timer)
        return taken

    def release(self, ids: Sequence[str], owner: str) -> int:
        """Hand back ``owner``'s leases on ``ids``."""
        with self._lock:
            mine = [i for i in ids if self._leases.get(i, ("",))[0] == owner]
            for timer_id in mine:
                del self._leases[timer_id]
        return len(mine)

    def delete(self, timer_id: str) -> bool:
        """Remove one timer."""
        with self._lock:
            self._leases.pop(timer_id, None)
            return self._rows.pop(timer_id, None) is not None

    def postpone(self, timer_id: str, due_at_wall: float) -> bool:
        """Move one timer to ``due_at_wall`` and free its lease; return whether it exists."""
        with self._lock:
            timer = self._rows.get(timer_id)
            if timer is None:
                return False
            self._rows[timer_id] = timer._replace(due_at=float(due_at_wall))
            self._leases.pop(timer_id, None)
        return True

    def delete_key(self, key: str) -> int:
        """Remove every timer of ``key``."""
        with self._lock:
            doomed = [i for i, t in self._rows.items() if t.key == key]
            for timer_id in doomed:
                del self._rows[timer_id]
                self._leases.pop(timer_id, None)
        return len(doomed)


def _order(timer: DueTimer) -> tuple[float, str]:
    return (timer.due_at, timer.id)


class DurableTimers:
    """A persistence plugin keeping a ``TimerStore`` in step with every save.

    Inside the save's transaction it replaces the instance's timer rows with the
    snapshot's pending timers, so the index and the snapshot never disagree (on stores
    that share a transaction).
    """

    def __init__(self, timers: TimerStore) -> None:
        self.timers = timers

    def on_persist(self, interp: Any, store: StateStore) -> None:
        """Rewrite the timer rows of the instance just saved."""
        key = str(interp.store_key)
        self.timers.delete_key(key)
        for deadline in deadlines_of(interp.snapshot()):
            payload = {k: v for k, v in deadline.items() if k != "due_at_wall"}
            self.timers.schedule(key, float(deadline["due_at_wall"]), payload)


@dataclass
class ScanResult:
    """What one scan did: instances woken, and keys whose wake failed (retried next scan)."""

    woken: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _machine_table(
    machines: Machine | Mapping[str, Machine] | Iterable[Machine],
) -> dict[str, Machine]:
    if isinstance(machines, Machine):
        return {machines.id: machines}
    if isinstance(machines, Mapping):
        return dict(machines)
    return {m.id: m for m in machines}


class DueTimerScanner:
    """Wake persisted instances whose ``after`` timers are due, and save them.

    Args:
        store: The ``StateStore`` holding the instances.
        machines: The charts, as one machine, several, or ``{machine id: machine}``;
            each instance is woken with the chart its snapshot names.
        timers: An optional ``TimerStore`` index (kept by ``DurableTimers``); without it
            the scanner reads every snapshot (fine for small stores).
        lock: The lock strategy for each wake (``OptimisticLock`` by default).
        plugins: Plugins attached to each woken instance (an ``OutboxPlugin``...).
        batch: Instances woken per scan at most.
        owner: Lease owner with a ``timers`` index; default ``host:pid:id``.
        lease_s: Seconds a claimed timer row stays this scanner's.
        wall: The epoch-seconds clock deciding what is due.
    """

    def __init__(
        self,
        store: StateStore,
        machines: Machine | Mapping[str, Machine] | Iterable[Machine],
        *,
        timers: TimerStore | None = None,
        lock: LockStrategy | None = None,
        plugins: Iterable[Any] = (),
        batch: int = 100,
        owner: str | None = None,
        lease_s: float = DEFAULT_CLAIM_LEASE_S,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError(f"batch must be an int >= 1, got {batch!r}")
        self.store = store
        self.machines = _machine_table(machines)
        self.timers = timers
        self.lock = lock
        self.plugins = tuple(plugins)
        self.batch = batch
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_s = lease_s
        self.wall = wall
        self._stop = threading.Event()

    def due_keys(self, now: float | None = None) -> list[tuple[str, float]]:
        """Return ``(key, earliest due time)`` of the instances due at ``now``, earliest first."""
        when = self.wall() if now is None else now
        if self.timers is not None:
            return _earliest((t.key, t.due_at) for t in self.timers.due(when, self.batch))
        found: list[tuple[str, float]] = []
        for key in self.store.list_keys(limit=1_000_000):
            record = self.store.load(key)
            if record is None:
                continue
            dues = [d["due_at_wall"] for d in deadlines_of(record.snapshot)]
            if dues and min(dues) <= when:
                found.append((key, float(min(dues))))
        return sorted(found, key=lambda item: item[1])[: self.batch]

    def scan(self, now: float | None = None) -> ScanResult:
        """Wake every due instance once; a failing wake is logged and left for the next scan."""
        when = self.wall() if now is None else now
        result = ScanResult()
        claimed: list[DueTimer] = []
        if self.timers is not None:
            claimed = self.timers.claim(when, self.batch, self.owner, self.lease_s)
            keys = _earliest((t.key, t.due_at) for t in claimed)
        else:
            keys = self.due_keys(when)
        for key, due in keys:
            try:
                self._wake(key, when)
            except Exception:
                logger.exception("waking timers of %r failed; retried at the next scan", key)
                result.failed.append(key)
                continue
            result.woken.append(key)
            emit(FactKind.TIMER_FIRED, purpose="machine", lag_s=max(0.0, when - due))
        if claimed and self.timers is not None:
            self.timers.release([t.id for t in claimed if t.key in result.failed], self.owner)
        return result

    def run_once(self, now: float | None = None) -> int:
        """Scan once; return how many instances were woken."""
        return len(self.scan(now).woken)

    def _wake(self, key: str, now: float) -> None:
        record = self.store.load(key)
        if record is None:
            if self.timers is not None:
                self.timers.delete_key(key)
            return
        machine_id = json.loads(record.snapshot).get("machine_id")
        machine = self.machines.get(machine_id)
        if machine is None:
            raise ConfigurationError(f"no machine {machine_id!r} given to the scanner for {key!r}")
        plugins = self.plugins + ((DurableTimers(self.timers),) if self.timers is not None else ())
        clock = SimulatedClock(wall_start=now)
        with persisted(self.store, key, machine, lock=self.lock, clock=clock, plugins=plugins):
            pass

    def run_forever(self, interval_s: float = 1.0) -> None:
        """Scan every ``interval_s`` seconds until ``stop()``."""
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(interval_s)

    def stop(self) -> None:
        """Make ``run_forever`` return after its current scan."""
        self._stop.set()


def _earliest(pairs: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """One entry per key with its earliest due time, earliest first."""
    best: dict[str, float] = {}
    for key, due in pairs:
        best[key] = min(due, best.get(key, due))
    return sorted(best.items(), key=lambda item: item[1])
