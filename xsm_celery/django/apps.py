"""Application configuration."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class XsmCeleryConfig(AppConfig):
    """The ``xsm_celery`` app: dead letters, their audit trail, outbox, inbox, snapshots, timers.

    The label is set explicitly because the module path ends in ``django``, which would
    otherwise become the label and clash with Django's own names.
    """

    name = "xsm_celery.django"
    label = "xsm_celery"
    verbose_name = _("Statechart tasks (xsm_celery)")
    default_auto_field = "django.db.models.BigAutoField"
