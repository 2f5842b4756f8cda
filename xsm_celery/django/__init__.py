"""A reusable Django app: dead-letter triage in the admin, and Django-backed stores.

Add ``"xsm_celery.django"`` to ``INSTALLED_APPS`` (the app label is ``xsm_celery``), run
``migrate``, and set ``app.conf.xsm_dead_letter_store = "django"`` so chart-driven Celery
tasks write their dead letters to the database the admin reads. The stores live in
``xsm_celery.django.stores``; settings are read lazily from one ``XSM_CELERY`` dict.

Nothing here imports models at import time, so the package is safe to import before
``django.setup()``.
"""

from __future__ import annotations

from xsm_celery import errors as _errors

try:
    import django  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="django", module="django") from exc

__all__: list[str] = []
