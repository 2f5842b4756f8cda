"""The Celery side of the admin: which app replays go through, and a task's current chart.

Replaying a task dead letter means sending the task again, so this app reaches into
``celery`` and ``xsm_celery.celery``; both are imported here, lazily, so a project that
only uses the stores needs neither.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.errors import ConfigurationError

__all__ = ["celery_app", "task_chart"]

_loaded: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


def celery_app() -> Any:
    """The Celery app named by ``XSM_CELERY["CELERY_APP"]``, else Celery's current app.

    The app's task modules are imported once (as a worker would), so the admin process
    knows the same tasks and charts as the workers.

    Raises:
        ConfigurationError: the setting names nothing importable, or Celery is missing.
    """
    path = get_settings().celery_app
    if path:
        app = import_string(path)
    else:
        try:
            from celery import current_app
        except ImportError as exc:
            raise ConfigurationError(
                'replaying task dead letters needs Celery: pip install "xsm-celery[celery]"'
            ) from exc
        app = getattr(current_app, "_get_current_object", lambda: current_app)()
    if not hasattr(app, "send_task"):
        raise ConfigurationError(
            f"XSM_CELERY['CELERY_APP'] = {path!r} is not a Celery app; name the Celery() object"
        )
    with _lock:
        if app not in _loaded:
            app.loader.import_default_modules()
            _loaded.add(app)
    return app


def task_chart(app: Any, task_name: str) -> Mapping[str, Any] | None:
    """The retry chart a registered ``ChartTask`` runs now, or None for other tasks."""
    task = app.tasks.get(task_name)
    if task is None:
        return None
    machine = getattr(task, "machine", None)
    if machine is None:
        # ChartTask keeps the chart it built at bind time on the class.
        bound = getattr(type(task), "_xsm_bound", None)
        machine = getattr(bound, "machine", None)
    config = getattr(machine, "config", None)
    return config if isinstance(config, Mapping) else None
