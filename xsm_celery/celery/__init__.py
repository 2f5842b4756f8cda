"""Celery integration: chart-driven retry, dead letters, durable timers and Beat entries.

Importing this package registers the shared tasks ``xsm_celery.fire_timers`` and
``xsm_celery.relay_outbox``, so a worker that imports it can run both Beat entries of
``Xsm.beat_schedule(...)``, and connects the worker signals that switch the exporters on
from the ``xsm_*`` settings (``xsm_celery.metrics.worker``).

Needs the ``celery`` extra. ``ChartTask`` and ``Xsm`` are the two entry points::

    from xsm_celery.celery import ChartTask, Xsm
"""

from __future__ import annotations

import sys as _sys

from xsm_celery import errors as _errors

try:
    import celery  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="celery", module="celery") from exc

from xsm_celery.celery.app import RELAY_OUTBOX_TASK, Xsm
from xsm_celery.celery.deadletter.replay import TaskReplayResult, replay_task
from xsm_celery.celery.fleet.admission import DEFERRED_STATE, task_deferred
from xsm_celery.celery.fleet.plan import AIMD, Concurrency, RateLimit
from xsm_celery.celery.serialization import require_json
from xsm_celery.celery.settings import XsmSettings, read_settings, register_keys
from xsm_celery.celery.task.chart_task import ChartTask
from xsm_celery.celery.task.charts import DEFAULT_CHART, load_task_chart
from xsm_celery.celery.task.header import HEADER
from xsm_celery.celery.task.markers import AttemptMarkers, MemoryAttemptMarkers
from xsm_celery.celery.task.tracer import ChartRetry
from xsm_celery.celery.worker.consumer import DispatcherStep, install_dispatcher
from xsm_celery.celery.worker.relay import install_relay, relay_outbox
from xsm_celery.celery.worker.status import sources_for_app as _sources_for_app
from xsm_celery.celery.worker.timers import FIRE_TIMERS_TASK, fire_due_timers, fire_timers
from xsm_celery.celery.workflow.api import Workflow, workflow_named, workflows_of
from xsm_celery.celery.workflow.service import celery_service
from xsm_celery.celery.workflow.stores import WorkflowStores
from xsm_celery.celery.workflow.view import PendingTimer, WorkflowView
from xsm_celery.errors import TaskGaveUp, WorkerLost
from xsm_celery.metrics.worker import ObservabilityConfig, observability_config
from xsm_celery.metrics.worker import connect_worker_signals as _connect_worker_signals

# The exporters' worker wiring lives with the exporters and imports nothing of this package;
# it is handed the app's stores here, so a worker that imports xsm_celery.celery switches on
# what its xsm_metrics_port / xsm_tracing / xsm_send_events / xsm_log_facts settings ask for.
_connect_worker_signals(sources=_sources_for_app)

#: Modules that moved into sub-packages, importable under the paths the docs named before the
#: move (``from xsm_celery.celery.relay import install_relay`` keeps working).
_MOVED_MODULES = {
    "consumer": "xsm_celery.celery.worker.consumer",
    "header": "xsm_celery.celery.task.header",
    "relay": "xsm_celery.celery.worker.relay",
    "tracer": "xsm_celery.celery.task.tracer",
}
for _old, _new in _MOVED_MODULES.items():
    _sys.modules[f"{__name__}.{_old}"] = _sys.modules[_new]

__all__ = [
    # Tasks
    "ChartTask",
    "ChartRetry",
    "DjangoChartTask",
    "Xsm",
    "TaskGaveUp",
    "WorkerLost",
    "HEADER",
    "DEFAULT_CHART",
    "load_task_chart",
    # Replay
    "TaskReplayResult",
    "replay_task",
    # Beat and timers
    "FIRE_TIMERS_TASK",
    "RELAY_OUTBOX_TASK",
    "fire_due_timers",
    "fire_timers",
    # Events: outbox relay and inbound dispatcher
    "DispatcherStep",
    "install_dispatcher",
    "install_relay",
    "relay_outbox",
    # Settings and checks
    "XsmSettings",
    "read_settings",
    "register_keys",
    "require_json",
    # Attempt markers
    "AttemptMarkers",
    "MemoryAttemptMarkers",
    # Fleet-wide limits and breakers (task options)
    "AIMD",
    "Concurrency",
    "RateLimit",
    "DEFERRED_STATE",
    "task_deferred",
    # Observability
    "ObservabilityConfig",
    "observability_config",
    # Durable workflows
    "PendingTimer",
    "Workflow",
    "WorkflowStores",
    "WorkflowView",
    "celery_service",
    "workflow_named",
    "workflows_of",
]


def __getattr__(name: str) -> object:
    """``DjangoChartTask`` imports Django, so it is loaded only when asked for."""
    if name == "DjangoChartTask":
        from xsm_celery.celery.task.django_task import DjangoChartTask

        return DjangoChartTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
