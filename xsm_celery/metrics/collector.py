"""The Prometheus collector of what is true now: store figures and the fleet's Redis state.

Registered on the registry a worker serves, it reads the stores and the fleet's Redis on
a scrape through ``read_figures``, so the numbers are the database's and Redis', whichever
worker answers: ``xsm_breaker_state`` of a fleet breaker is the state in Redis (an elapsed
cooldown applied), a bucket's ``xsm_limit_tokens`` is refilled to the moment of the read.
One reading serves every scrape within ``CACHE_S``. A store that is down shows as
``xsm_store_up{store="..."} 0`` (the fleet as ``store="fleet"``) and its gauges are left out
instead of failing the scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from xsm_celery.metrics.figures import FLEET_WORKER, Figures, Sources, WorkerState, read_figures
from xsm_celery.metrics.labels import LabelGuard
from xsm_celery.metrics.states import BREAKER_STATES

__all__ = ["CACHE_S", "StoreFiguresCollector"]

#: Seconds one reading of the stores and the fleet serves scrapes for.
CACHE_S = 1.0

_PARTS = ("dead_letters", "outbox", "timers", "instances", "fleet")

#: Fleet gauges: row kind -> (metric, help, detail field).
_FLEET_GAUGES = (
    ("rate", "xsm_limit_tokens", "Tokens a fleet bucket holds now (refilled at read).", "tokens"),
    (
        "rate",
        "xsm_limit_reserved_tokens",
        "Tokens of a fleet bucket promised to deferred calls.",
        "reserved",
    ),
    ("window", "xsm_limit_window_used", "Places a fleet sliding window has used.", "used"),
    ("slots", "xsm_limit_slots_held", "Slots of a fleet slot pool held now.", "held"),
)


class StoreFiguresCollector:
    """A ``prometheus_client`` collector over ``Sources`` (built lazily, once).

    Args:
        sources: The stores, or a function returning them (called at the first scrape,
            so a worker does not open its stores before it serves anything).
    """

    def __init__(
        self, sources: Sources | Callable[[], Sources], *, cache_s: float = CACHE_S
    ) -> None:
        self._sources = sources
        self._guard = LabelGuard()
        self._cache_s = cache_s
        self._read: tuple[float, Figures] | None = None
        self._lock = threading.Lock()

    def _resolve(self) -> Sources:
        if callable(self._sources):
            self._sources = self._sources()
        return self._sources

    def _figures(self) -> tuple[Sources, Figures]:
        with self._lock:
            sources = self._resolve()
            now = time.monotonic()
            if self._read is None or now - self._read[0] >= self._cache_s:
                self._read = (now, read_figures(sources))
            return sources, self._read[1]

    def collect(self) -> Iterator[Any]:
        """The gauges of one reading (``prometheus_client`` calls this on scrape)."""
        from prometheus_client.core import GaugeMetricFamily

        sources, figures = self._figures()
        up = GaugeMetricFamily(
            "xsm_store_up", "Whether a store answered the last scrape.", labels=["store"]
        )
        for part in _PARTS:
            if getattr(sources, part) is not None:
                up.add_metric([part], 0.0 if part in figures.errors else 1.0)
        yield up
        if figures.dead_letters is not None:
            recent = GaugeMetricFamily(
                "xsm_dead_letters_recent",
                "Dead letters taken within the window, by reason.",
                labels=["window", "reason"],
            )
            for window, counts in figures.dead_letters.items():
                for reason, n in counts.items():
                    recent.add_metric(list(self._guard.admit((window, reason))), float(n))
            yield recent
        if figures.outbox is not None:
            yield GaugeMetricFamily(
                "xsm_outbox_backlog",
                "Outbox rows not yet published.",
                value=float(figures.outbox.pending),
            )
            yield GaugeMetricFamily(
                "xsm_outbox_oldest_pending_age_seconds",
                "Age of the oldest unpublished outbox row (0 when none).",
                value=figures.outbox.oldest_age_s or 0.0,
            )
            yield GaugeMetricFamily(
                "xsm_outbox_failed_rows",
                "Outbox rows set aside after max_attempts broker refusals.",
                value=float(figures.outbox.failed),
            )
        if figures.timers is not None:
            yield GaugeMetricFamily(
                "xsm_timers_pending", "Durable timers stored.", value=float(figures.timers.pending)
            )
            yield GaugeMetricFamily(
                "xsm_timer_current_lag_seconds",
                "How late the earliest stored timer is (0 when none is due).",
                value=figures.timers.lag_s,
            )
        if figures.instances is not None:
            family = GaugeMetricFamily(
                "xsm_workflow_instances",
                "Persisted machine instances by state.",
                labels=["machine", "state"],
            )
            for machine, state, n in figures.instances:
                family.add_metric(list(self._guard.admit((machine, state))), float(n))
            yield family
        if sources.fleet is not None and "fleet" not in figures.errors:
            fleet = [row for row in figures.workers or [] if row.worker == FLEET_WORKER]
            yield from self._fleet(fleet)

    def _fleet(self, rows: list[WorkerState]) -> Iterator[Any]:
        """The fleet's breakers and limiters as read from its Redis for this scrape."""
        from prometheus_client.core import GaugeMetricFamily

        breakers = GaugeMetricFamily(
            "xsm_breaker_state",
            "Fleet breaker state in Redis now: 0 closed, 1 half-open, 2 open.",
            labels=["breaker", "scope"],
        )
        for row in rows:
            value = BREAKER_STATES.get(row.state)
            if row.kind == "breaker" and value is not None:
                breakers.add_metric([*self._guard.admit((row.name,)), "fleet"], float(value))
        yield breakers
        for kind, name, doc, field in _FLEET_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["limit"])
            for row in rows:
                if row.kind == kind and field in row.detail:
                    family.add_metric(list(self._guard.admit((row.name,))), row.detail[field])
            yield family
