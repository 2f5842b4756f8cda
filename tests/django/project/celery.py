"""The test project's Celery apps: Redis (real workers) and in-memory (admin tests).

Both keep dead letters and durable timers in the Django database through the app's
stores, which is what a Django shop configures.
"""

from __future__ import annotations

from celery import Celery

from xsm_celery.django.stores import DjangoDeadLetterStore, DjangoTimerStore

app = Celery("xsm_django_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    xsm_dead_letter_store=DjangoDeadLetterStore(),
    xsm_timer_store=DjangoTimerStore(),
    worker_hijack_root_logger=False,
)

#: No broker process: ``send_task`` puts messages on kombu's in-memory transport.
memory_app = Celery("xsm_django_memory", set_as_current=False)
memory_app.conf.update(
    broker_url="memory://",
    result_backend="cache+memory://",
    xsm_dead_letter_store=DjangoDeadLetterStore(),
    xsm_timer_store=DjangoTimerStore(),
    xsm_attempt_markers="memory://",
)

import tests.django.project.tasks  # noqa: E402, F401  registers the shared task on both apps
