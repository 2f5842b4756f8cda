"""Celery integration: chart-driven retry, dead letters, durable timers and Beat entries.

Importing this package registers the shared tasks ``xsm_celery.fire_timers`` and
``xsm_celery.relay_outbox``, so a worker that imports it can run both Beat entries of
``Xsm.beat_schedule(...)``.

Needs the ``celery`` extra. ``ChartTask`` and ``Xsm`` are the two entry points::

    from xsm_celery.celery import ChartTask, Xsm
"""

from __future__ import annotations

from xsm_celery.errors import MissingExtraError

try:
    import celery  # noqa: F401
except ImportError as exc:
    raise MissingExtraError(extra="celery", module="celery") from exc

from xsm_celery.celery.app import RELAY_OUTBOX_TASK, Xsm
from xsm_celery.celery.charts import DEFAULT_CHART, load_chart
from xsm_celery.celery.consumer import DispatcherStep, install_dispatcher
from xsm_celery.celery.execute import HEADER
from xsm_celery.celery.markers import AttemptMarkers, MemoryAttemptMarkers
from xsm_celery.celery.relay import install_relay, relay_outbox
from xsm_celery.celery.replay import TaskReplayResult, replay_task
from xsm_celery.celery.serialization import require_json
from xsm_celery.celery.service import celery_service
from xsm_celery.celery.settings import XsmSettings, read_settings, register_keys
from xsm_celery.celery.task import ChartTask
from xsm_celery.celery.timers import FIRE_TIMERS_TASK, fire_due_timers, fire_timers
from xsm_celery.celery.workflow import Workflow, workflow_named, workflows_of
from xsm_celery.celery.workflow_stores import WorkflowStores
from xsm_celery.celery.workflow_view import PendingTimer, WorkflowView
from xsm_celery.errors import TaskGaveUp, WorkerLost

__all__ = [
    # Tasks
    "ChartTask",
    "Xsm",
    "TaskGaveUp",
    "WorkerLost",
    "HEADER",
    "DEFAULT_CHART",
    "load_chart",
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
    # Durable workflows
    "PendingTimer",
    "Workflow",
    "WorkflowStores",
    "WorkflowView",
    "celery_service",
    "workflow_named",
    "workflows_of",
]
