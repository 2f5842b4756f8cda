"""A replay outside a worker finds tasks that ``autodiscover_tasks`` registers."""

from __future__ import annotations

import sys

from celery import Celery

from tests.contract_dead_letters import make_record
from xsm_celery.celery import replay_task
from xsm_celery.patterns import DeadLetterStore


def test_an_autodiscovered_task_is_not_reported_unregistered() -> None:
    """The dry run imports what the worker would, so no "is not registered" warning."""
    sys.modules.pop("tests.cli.autodisc.tasks", None)
    app = Celery("autodisc", broker="memory://", set_as_current=False)
    app.autodiscover_tasks(["tests.cli.autodisc"])
    store = DeadLetterStore()
    record = make_record(task_name="autodisc.ping", task_args=[], task_kwargs={})
    store.put(record)
    result = replay_task(store, record.id, app)
    assert result.warnings == []
    assert "autodisc.ping" in app.tasks
