"""Django-backed stores implementing the same protocols as the memory and SQLAlchemy ones.

Every store takes an optional database alias (``using``); without one it uses
``XSM_CELERY["DATABASE"]``. Each can be built with no arguments, which is what a Celery
setting such as ``xsm_dead_letter_store = "django"`` needs. Give the snapshot store and the
outbox the same alias: inside ``DjangoSnapshotStore.lock()`` (or any
``transaction.atomic()`` on that alias) the outbox rows commit or roll back with the
snapshot.
"""

from __future__ import annotations

from xsm_celery.django.stores.dead_letters import DjangoDeadLetterStore
from xsm_celery.django.stores.inbox import DjangoInbox
from xsm_celery.django.stores.outbox import DjangoOutboxStore
from xsm_celery.django.stores.snapshots import DjangoSnapshotStore
from xsm_celery.django.stores.timers import DjangoTimerStore

__all__ = [
    "DjangoDeadLetterStore",
    "DjangoInbox",
    "DjangoOutboxStore",
    "DjangoSnapshotStore",
    "DjangoTimerStore",
]
