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

    def ready(self) -> None:
        """Tell the Celery integration that ``XSM_CELERY`` is this app's setting."""
        accept_django_setting()


def accept_django_setting() -> None:
    """Register ``xsm_celery`` as a known Celery key, when the Celery integration exists.

    ``app.config_from_object("django.conf:settings", namespace="CELERY")`` exposes every
    Django setting to Celery, so this app's ``XSM_CELERY`` dict shows up as the Celery key
    ``xsm_celery``, which the Celery integration would refuse as an unknown ``xsm_``
    setting. The Celery integration is imported only here, and only if installed.
    """
    try:
        from xsm_celery.celery.settings import register_keys
    except ImportError:
        return
    register_keys("xsm_celery")
