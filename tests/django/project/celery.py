"""The test project's Celery app: Redis broker and result backend, JSON only."""

from __future__ import annotations

from celery import Celery

app = Celery("xsm_django_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
