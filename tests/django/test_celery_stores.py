"""``xsm_dead_letter_store = "django"`` puts a chart task's records in the Django app's tables."""

from __future__ import annotations

import pytest
from celery import Celery

from xsm_celery.celery import ChartTask
from xsm_celery.celery.stores import AppStores
from xsm_celery.django.stores import DjangoDeadLetterStore, DjangoOutboxStore, DjangoTimerStore
from xsm_celery.patterns import RetryPolicy


def _app(**conf: object) -> Celery:
    app = Celery("django-stores", set_as_current=False)
    app.conf.update(task_always_eager=True, task_eager_propagates=False, **conf)
    return app


def test_django_names_every_store_of_the_app(sqlite_db: str) -> None:
    """ "django" resolves the dead-letter and timer stores to the Django app's classes."""
    stores = AppStores(_app(xsm_dead_letter_store="django", xsm_timer_store="django"))
    assert isinstance(stores.dead_letters(), DjangoDeadLetterStore)
    assert isinstance(stores.timers(), DjangoTimerStore)


def test_an_alias_after_the_scheme_picks_the_database(sqlite_db: str) -> None:
    """ "django://<alias>" opens the store on that database alias."""
    store = AppStores(_app(xsm_dead_letter_store=f"django://{sqlite_db}")).dead_letters()
    assert isinstance(store, DjangoDeadLetterStore)
    assert store.using == sqlite_db


def test_the_relay_opens_the_django_outbox(sqlite_db: str) -> None:
    """The Beat relay resolves xsm_outbox_store="django" to DjangoOutboxStore."""
    from xsm_celery.celery.worker import relay

    app = _app(xsm_outbox_store="django", broker_url="memory://")
    built = relay.relay_for(app)
    assert isinstance(built.store, DjangoOutboxStore)


def test_a_chart_task_dead_letters_into_the_django_table(sqlite_db: str) -> None:
    """A task that gives up on a configured "django" store leaves one row the admin lists."""
    app = _app(xsm_dead_letter_store="django", xsm_attempt_markers="memory://")

    @app.task(base=ChartTask, retry_policy=RetryPolicy(max_attempts=1), give_up_on=(ValueError,))
    def refuse(order_id: str) -> None:
        raise ValueError(f"order {order_id} is malformed")

    result = refuse.delay("o-7")
    with pytest.raises(ValueError, match="o-7"):
        result.get(propagate=True)
    [record] = DjangoDeadLetterStore().list()
    assert record.task_id == result.id
    assert record.errors[-1]["message"] == "order o-7 is malformed"
