"""``Xsm(app)``: the app-level helpers, so a project writes two lines, not a recipe.

::

    xsm = Xsm(app)

    @xsm.task(retry_policy=RetryPolicy(max_attempts=5, base_ms=500, jitter="full"))
    def charge(order_id, amount): ...

    app.conf.beat_schedule = {**xsm.beat_schedule(relay_every=5, timers_every=10)}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from xsm_celery.celery.settings import XsmSettings, read_settings
from xsm_celery.celery.task.chart_task import ChartTask
from xsm_celery.celery.worker.timers import FIRE_TIMERS_TASK
from xsm_celery.errors import ConfigurationError

__all__ = ["RELAY_OUTBOX_TASK", "Xsm"]

#: Name of the outbox relay's Beat task (registered by ``xsm_celery.celery.worker.relay``).
RELAY_OUTBOX_TASK = "xsm_celery.relay_outbox"


class Xsm:
    """The xsm_celery extension of one Celery app.

    Args:
        app: The Celery app.
        task_base: The base class ``task()`` uses; by default ``ChartTask``, or its Django
            variant when the app's task class is Celery's ``DjangoTask`` (which keeps
            ``delay_on_commit``).
    """

    def __init__(self, app: Any, *, task_base: type[ChartTask] | None = None) -> None:
        self.app = app
        self._base = task_base

    @property
    def settings(self) -> XsmSettings:
        """The app's validated ``xsm_*`` settings."""
        return read_settings(self.app)

    @property
    def task_base(self) -> type[ChartTask]:
        """The chart task class ``task()`` registers tasks with."""
        if self._base is None:
            self._base = _default_base(self.app)
        return self._base

    def task(self, *args: Any, **options: Any) -> Any:
        """``@app.task(base=ChartTask, ...)``, usable bare (``@xsm.task``) or with options."""
        options.setdefault("base", self.task_base)
        if len(args) == 1 and callable(args[0]) and not options.keys() - {"base"}:
            fn: Callable[..., Any] = args[0]
            return self.app.task(**options)(fn)
        return self.app.task(*args, **options)

    def workflow(self, machine: Any = None, /, **options: Any) -> Any:
        """Run ``machine`` as a durable workflow on this app; returns the ``Workflow``.

        ``xsm.workflow(order_machine, store="django", queue="orders")``, or as a decorator
        over a function returning the machine: ``@xsm.workflow(store="django")``. Options
        are ``Workflow``'s (``store``, ``name``, ``queue``, ``retry_policy``...).
        """
        from xsm_celery.celery.workflow.api import Workflow, workflow_decorator

        if machine is None:
            return workflow_decorator(self.app, options)
        return Workflow(self.app, machine, **options)

    def beat_schedule(
        self, relay_every: float | None = None, timers_every: float | None = 10.0
    ) -> dict[str, dict[str, Any]]:
        """Beat entries for the durable timers and, if asked, the outbox relay.

        Args:
            relay_every: Seconds between outbox relay runs; None leaves the relay out.
            timers_every: Seconds between due-timer scans; None leaves them out.
        """
        entries: dict[str, dict[str, Any]] = {}
        if timers_every is not None:
            entries["xsm-fire-timers"] = _entry(FIRE_TIMERS_TASK, "timers_every", timers_every)
        if relay_every is not None:
            entries["xsm-relay-outbox"] = _entry(RELAY_OUTBOX_TASK, "relay_every", relay_every)
        return entries


def _entry(task: str, name: str, every: float) -> dict[str, Any]:
    """A Beat entry whose tick expires when the next one is due.

    Ticks queued while no worker runs would otherwise pile up and all run at once when one
    starts; each scan or relay run covers everything due, so only the newest tick matters.
    """
    seconds = _seconds(name, every)
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


def _seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigurationError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _default_base(app: Any) -> type[ChartTask]:
    """The Django variant when the app's task class is Celery's ``DjangoTask``."""
    try:
        from celery.contrib.django.task import DjangoTask
    except ImportError:
        return ChartTask
    task_cls = app.Task
    if isinstance(task_cls, type) and issubclass(task_cls, DjangoTask):
        from xsm_celery.celery.task.django_task import DjangoChartTask

        return DjangoChartTask
    return ChartTask
