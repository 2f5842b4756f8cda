"""The shop's Celery app: chart-driven retries, dead letters and outbox in the Django database."""

from __future__ import annotations

import os

from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.django.stores import DjangoDeadLetterStore, DjangoOutboxStore, DjangoTimerStore

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_project.settings")

app = Celery("shop_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    # Dead letters land where the admin reads them; long retry delays become timer rows;
    # the Beat relay publishes the outbox rows the tasks write.
    xsm_dead_letter_store=DjangoDeadLetterStore(),
    xsm_timer_store=DjangoTimerStore(),
    xsm_outbox_store=DjangoOutboxStore(),
)
xsm = Xsm(app)
app.conf.beat_schedule = {
    # Two lines of Beat: fire due retry timers and relay the outbox.
    **xsm.beat_schedule(relay_every=5, timers_every=10),
}
app.autodiscover_tasks()
