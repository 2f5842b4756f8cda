"""Django-backed stores implementing the same protocols as the memory and SQLAlchemy ones.

Every store takes an optional database alias (``using``); without one it uses
``XSM_CELERY["DATABASE"]``. Each can be built with no arguments, which is what a Celery
setting such as ``xsm_dead_letter_store = "django"`` needs. Give the snapshot store and the
outbox the same alias: inside ``DjangoSnapshotStore.lock()`` (or any
``transaction.atomic()`` on that alias) the outbox rows commit or roll back with the
snapshot.
"""

from __future__ import annotations

from xsm_celery.django._dead_letter_store import DjangoDeadLetterStore
from xsm_celery.django._inbox_store import DjangoInbox
from xsm_celery.django._outbox_store import DjangoOutboxStore
from xsm_celery.django._snapshot_store import DjangoSnapshotStore
from xsm_celery.django._timer_store import DjangoTimerStore

__all__ = [
    "DjangoDeadLetterStore",
    "DjangoInbox",
    "DjangoOutboxStore",
    "DjangoSnapshotStore",
    "DjangoTimerStore",
]
