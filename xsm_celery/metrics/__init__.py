"""Observability of xsm_celery: Prometheus metrics, OpenTelemetry spans, Celery events, logs.

Every exporter here is a subscriber of the one fact stream, ``xsm_celery.hooks``; the core
never imports this package, and it imports no other integration of the package. In a Celery
worker they are switched on by settings (see ``xsm_celery.metrics.worker``); elsewhere, call
the ``install_*`` functions::

    from xsm_celery.metrics import install_prometheus, install_tracing

    install_prometheus()   # pip install 'xsm-celery[metrics]'
    install_tracing()      # pip install 'xsm-celery[tracing]' (and an OpenTelemetry SDK)

``read_figures`` reads what the stores hold now (backlog, timers, recent dead letters,
instances by state), for a scrape, ``xsm-celery status`` or the Django admin status page.
"""

from __future__ import annotations

from typing import Any as _Any

from xsm_celery.metrics.events import CeleryEvents, install_events
from xsm_celery.metrics.figures import (
    Figures,
    OutboxFigures,
    Sources,
    TimerFigures,
    WorkerState,
    read_figures,
)
from xsm_celery.metrics.logs import FactLogger, install_logging

__all__ = [
    # Exporters
    "install_prometheus",
    "install_tracing",
    "install_events",
    "install_logging",
    "CeleryEvents",
    "FactLogger",
    # Figures read from the stores
    "Figures",
    "OutboxFigures",
    "Sources",
    "TimerFigures",
    "WorkerState",
    "read_figures",
]


def install_prometheus(registry: _Any = None) -> _Any:
    """Subscribe the Prometheus metrics (``xsm_celery.metrics.prometheus``); needs ``metrics``."""
    from xsm_celery.metrics.prometheus import install_prometheus as install

    return install(registry)


def install_tracing(tracer_provider: _Any = None) -> _Any:
    """Subscribe the OpenTelemetry spans (``xsm_celery.metrics.tracing``); needs ``tracing``."""
    from xsm_celery.metrics.tracing import install_tracing as install

    return install(tracer_provider)
