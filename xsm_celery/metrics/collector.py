"""The Prometheus collector of store figures: backlog, failed rows, timers, recent dead letters.

Registered on the registry a worker serves, it reads the stores on each scrape through
``read_figures``, so the numbers are the database's, whichever worker answers. A store
that is down shows as ``xsm_store_up{store="..."} 0`` instead of failing the scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from xsm_celery.metrics.figures import Sources, read_figures
from xsm_celery.metrics.labels import LabelGuard

__all__ = ["StoreFiguresCollector"]

_PARTS = ("dead_letters", "outbox", "timers", "instances")


class StoreFiguresCollector:
    """A ``prometheus_client`` collector over ``Sources`` (built lazily, once).

    Args:
        sources: The stores, or a function returning them (called at the first scrape,
            so a worker does not open its stores before it serves anything).
    """

    def __init__(self, sources: Sources | Callable[[], Sources]) -> None:
        self._sources = sources
        self._guard = LabelGuard()

    def _resolve(self) -> Sources:
        if callable(self._sources):
            self._sources = self._sources()
        return self._sources

    def collect(self) -> Iterator[Any]:
        """The gauges of one reading (``prometheus_client`` calls this on scrape)."""
        from prometheus_client.core import GaugeMetricFamily

        sources = self._resolve()
        figures = read_figures(sources)
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
