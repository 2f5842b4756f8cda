"""Resolve the setting value ``"django"`` to the stores of the ``xsm_celery.django`` app.

``app.conf.xsm_dead_letter_store = "django"`` (or ``"django://<alias>"`` for another
database alias) puts a Celery shop's dead letters, timers and outbox rows in the Django
app's tables, where Django admin shows them. This is the one place the Celery integration
imports the Django one, and only when a setting names it.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.errors import ConfigurationError

__all__ = ["is_django_url", "open_django_store"]

_SCHEME = "django://"

#: Which class of ``xsm_celery.django.stores`` serves each kind of store.
_CLASSES = {
    "dead_letters": "DjangoDeadLetterStore",
    "timers": "DjangoTimerStore",
    "outbox": "DjangoOutboxStore",
    "snapshots": "DjangoSnapshotStore",
    "inbox": "DjangoInbox",
}


def is_django_url(value: object) -> bool:
    """Whether a setting value names the Django app's stores."""
    return isinstance(value, str) and (value == "django" or value.startswith(_SCHEME))


def open_django_store(value: str, kind: str) -> Any:
    """The Django store of ``kind`` for ``"django"`` or ``"django://<alias>"``.

    Raises:
        ConfigurationError: Django or the app is not set up; the message says what to add.
    """
    alias = value[len(_SCHEME) :] if value.startswith(_SCHEME) else ""
    try:
        from django.apps import apps
    except ImportError as exc:
        raise ConfigurationError(
            f"{value!r} names the Django stores, but Django is not installed; "
            'run: pip install "xsm-celery[django]"'
        ) from exc
    if not apps.ready or not apps.is_installed("xsm_celery.django"):
        raise ConfigurationError(
            f"{value!r} names the Django stores: call django.setup() first and add "
            "'xsm_celery.django' to INSTALLED_APPS"
        )
    from xsm_celery.django import stores

    return getattr(stores, _CLASSES[kind])(using=alias or None)
