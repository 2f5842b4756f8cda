"""``DjangoChartTask``: a chart task that keeps Celery's Django helpers (``delay_on_commit``).

Celery's ``DjangoTask`` publishes a task only once the surrounding database transaction
commits; mixing it in keeps that for chart tasks, so an order row and the task that charges
it cannot disagree. ``Xsm(app).task`` picks this class when the app's task class is
``DjangoTask`` (the default of a Django project since Celery 5.4).
"""

from __future__ import annotations

from celery.contrib.django.task import DjangoTask

from xsm_celery.celery.task.chart_task import ChartTask

__all__ = ["DjangoChartTask"]


class DjangoChartTask(ChartTask, DjangoTask):  # type: ignore[type-arg]
    """A ``ChartTask`` with ``delay_on_commit`` and ``apply_async_on_commit``."""
